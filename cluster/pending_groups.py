"""The groups a run segment had admitted ahead of its last step when it checkpointed, and how the segment that
resumes from that checkpoint trains them instead of sampling, and paying for, their questions again.

Training asynchronously (``train.max_staleness`` k >= 1), the collector admits up to k·Q groups beyond the step
it trains (conductor/staleness.py). A checkpoint names them twice: their questions in the sampler state's
requeue list, and the groups themselves (``PendingGroups``; cluster/grpo_recipe.py takes both from the
collector at once). They keep running after the checkpoint, and the loop's end lets those still in flight come
back (cluster/grpo_recipe.py), so their records are in the replay store, paid for, when the run resumes. The
resumed segment carries over each one it finds there (``carried_over``), trains it as an unbroken run would
have, and draws again only the questions of the rest, after them: the questions come in the unbroken run's
order when the groups that came back were the first admitted (all of them, say), not otherwise.

Which records count: a pending group's, of its question in this run's training split and its G samples, all
at one version in [max(floor, V - k), V] of the snapshot (V its version). So they were sampled by the
checkpoint's own line of weights (a killed segment may have trained and published past the checkpoint, and a
finishing segment publishes its best policy for the held-out evaluation: what those sampled is left alone),
not by weights lost with a learner or rolled back (below the collector's floor), and are not too stale to train.

Versions: a resumed segment publishes the checkpoint's weights again as its first version F, above any version
in the store. Weights V are weights F, so a record sampled at V - j is j versions behind F: a group carried
over is renumbered to F - j, and the staleness bound treats it as an unbroken run would have. Each group of a
snapshot carries its offset from the store's numbering (0 for its own segment's groups; for a group carried
over and still untrained at the next checkpoint, its offset then plus F - V), so a later resume finds it and
renumbers it right.
``trained_groups.jsonl`` shows the renumbered version; the store keeps the sampled one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.compute as pc

from conductor.group_buffer import Group
from conductor.replay_store import ReplayStore
from conductor.rollout_record import from_table
from conductor.tasks.splits import with_requeued


@dataclass(frozen=True)
class PendingGroup:
    group_id: str
    question_id: str
    offset: int = 0   # this segment's version of a record of it, less the version the store keeps it under


@dataclass(frozen=True)
class PendingGroups:
    version: int = 0                        # the engines' policy version: the checkpoint's weights
    floor: int = 0                          # no group sampled before this version is trained
    groups: tuple[PendingGroup, ...] = ()   # in admission order

    def to_json(self) -> dict[str, Any]:
        return {"version": self.version, "floor": self.floor,
                "groups": [[group.group_id, group.question_id, group.offset] for group in self.groups]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PendingGroups:
        """An empty snapshot for a checkpoint that has none (sync mode, or written before there were any)."""
        if not data:
            return cls()
        return cls(int(data["version"]), int(data["floor"]),
                   tuple(PendingGroup(str(entry[0]), str(entry[1]), int(entry[2])) for entry in data["groups"]))


class FoundGroup(NamedTuple):
    records: Group   # as the store keeps them
    offset: int      # what the snapshot's numbering adds to their version


def found(store: ReplayStore, pending: PendingGroups, *, limit: int, max_staleness: int, group_size: int,
          train_ids: Collection[str]) -> list[FoundGroup]:
    """The pending groups whose records ``store`` holds as the module docstring says, in admission order, at
    most ``limit`` (the staleness bound's room)."""
    oldest = max(pending.floor, pending.version - max_staleness)
    wanted = {group.group_id: group for group in pending.groups if group.question_id in train_ids}
    if not wanted or limit <= 0 or pending.version < oldest:
        return []
    offsets = {group.offset for group in wanted.values()}
    table, _ = store.read(min_version=oldest - max(offsets), max_version=pending.version - min(offsets))
    if table.num_rows:
        group_ids = table.column("group_id")
        table = table.filter(pc.is_in(group_ids, value_set=pa.array(list(wanted), type=group_ids.type)))
    by_group: dict[str, Group] = {}
    for record in from_table(table):
        by_group.setdefault(record.group_id, []).append(record)
    groups = []
    for group_id, entry in wanted.items():
        records = by_group.get(group_id, [])
        versions = {record.policy_version + entry.offset for record in records}
        if len(records) == group_size and len(versions) == 1 and oldest <= versions.pop() <= pending.version:
            groups.append(FoundGroup(records, entry.offset))
    return groups[:limit]


def renumbered(group: Group, shift: int) -> Group:
    """``group`` with every record's version moved by ``shift``."""
    return [dataclasses.replace(record, policy_version=record.policy_version + shift) for record in group]


def carried_over(store: ReplayStore, pending: PendingGroups, sampler_state: Mapping[str, Any], *, limit: int,
                 max_staleness: int, group_size: int, train_ids: Collection[str],
                 ) -> tuple[list[FoundGroup], dict[str, Any]]:
    """The pending groups ``found`` in ``store``, and the checkpoint's sampler state without their questions.
    Its requeue list starts with the pending groups' questions, in the same order; a state whose list does not
    carries nothing over."""
    requeue = list(sampler_state.get("requeue", []))
    head = [group.question_id for group in pending.groups]
    if requeue[:len(head)] != head:
        return [], dict(sampler_state)
    groups = found(store, pending, limit=limit, max_staleness=max_staleness, group_size=group_size,
                   train_ids=train_ids)
    gone = {group.records[0].group_id for group in groups}
    kept = [group.question_id for group in pending.groups if group.group_id not in gone]
    rest = {key: value for key, value in sampler_state.items() if key != "requeue"}
    return groups, with_requeued(rest, kept + requeue[len(head):])

