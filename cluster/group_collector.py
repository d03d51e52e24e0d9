"""GroupCollector: the groups of the next training step. Issues rollout requests while the staleness
bound admits them (conductor/staleness.py), each keyed for its random draws by the question sampler's state
(conductor/draw_key.py), reads this run segment's new files from the replay store,
drops groups older than k versions, hands out the oldest, and with ``refill_rounds`` replaces groups
without reward spread by fresh questions (dynamic sampling). While it waits it polls the rollout feed
and calls ``on_wait`` (the driver's actor care: restart counts, engine repair).

Which groups a step gets: by default the oldest that have arrived, so a slow group waits for a later step
while faster ones train. With ``in_request_order`` (``train.replayable``) a step gets the next groups in the
order they were requested, waiting for a slow one: every step trains on the same groups whatever finished
first, so a second run with the same seed trains as the first did and, over the worker-response cache,
replays its calls. A step's groups go to the learner in request order either way."""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cluster.pending_groups import FoundGroup, PendingGroup, PendingGroups, renumbered
from cluster.rollout_feed import RolloutFeed
from conductor.draw_key import request_key
from conductor.group_buffer import Group, GroupBuffer
from conductor.replay_store import Cursor, ReplayStore
from conductor.rollout import RolloutRequest, batch_id_of
from conductor.rollout_record import RolloutRecord, from_table
from conductor.staleness import StalenessManager
from conductor.tasks.splits import QuestionSampler, with_requeued
from learner.train_batch import has_signal, scored_groups

POLL_S = 1.0
SETTLE_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Collected:
    groups: list[Group]
    stale_dropped: int
    refill_rounds: int


class GroupCollector:
    def __init__(self, feed: RolloutFeed, store: ReplayStore, sampler: QuestionSampler, staleness: StalenessManager,
                 cursor: Cursor, *, segment: str, first_version: int, questions_per_batch: int, refill_rounds: int,
                 filter_zero_spread: bool, on_wait: Callable[[], None], count: Callable[[str, int], None],
                 stall_timeout_s: float = 1800.0, in_request_order: bool = False):
        self.feed, self.store, self.sampler, self.staleness, self.cursor = feed, store, sampler, staleness, cursor
        self.segment, self.first_version = segment, first_version
        self.questions_per_batch, self.refill_rounds = questions_per_batch, refill_rounds
        self.filter_zero_spread = filter_zero_spread
        self.on_wait, self.count = on_wait, count
        self.buffer = GroupBuffer()
        self.requests = 0
        self.floor = first_version  # no group sampled before this version is trained
        self.stall_timeout_s = stall_timeout_s
        self.in_request_order = in_request_order
        self.requested: deque[tuple[str, str]] = deque()  # (batch id, group id) not yet taken, in request order
        self.given_up_groups: set[str] = set()  # their places were freed: groups written late are not counted again
        self.outstanding: dict[str, str] = {}  # group id -> question id, admitted and not yet taken or let go
        self.offsets: dict[str, int] = {}  # group id -> version offset from the store's, of a group carried over

    def raise_floor(self, version: int) -> None:
        """Groups sampled before ``version`` are dropped when next seen (weights that were rolled back, or
        lost with a learner, sampled them)."""
        self.floor = max(self.floor, version)

    def sampler_state(self) -> dict[str, Any]:
        """The sampler's state for a checkpoint, naming first the questions admitted but not yet taken (up to
        k·Q of them in async mode): a run resumed from it draws them again, in the order they were admitted,
        instead of skipping them."""
        return with_requeued(self.sampler.state(), list(self.outstanding.values()))

    def pending(self, version: int) -> PendingGroups:
        """The same groups for a checkpoint, by id (cluster/pending_groups.py): a resumed run trains those whose
        records are in the store rather than drawing their questions again. ``version``: the engines', whose
        weights the checkpoint saves."""
        return PendingGroups(version, self.floor, tuple(PendingGroup(group_id, question_id, self.offsets.get(
            group_id, 0)) for group_id, question_id in self.outstanding.items()))

    def carry_over(self, groups: list[FoundGroup], shift: int) -> None:
        """A checkpoint's pending groups found in the store, renumbered to this segment's versions (their offset
        into the snapshot's, then ``shift`` from the snapshot's version to this segment's first): admitted
        first, in the order they were, ahead of the questions drawn again."""
        if not groups:
            return
        offsets = [group.offset + shift for group in groups]
        renumbered_groups = [sorted(renumbered(group.records, offset), key=request_order)
                             for group, offset in zip(groups, offsets)]
        self.staleness.start(len(groups))
        self.floor = min(self.floor, *(group[0].policy_version for group in renumbered_groups))  # before this segment
        self.buffer.add(record for group in renumbered_groups for record in group)
        for group, offset in zip(renumbered_groups, offsets):
            group_id = group[0].group_id
            self.outstanding[group_id] = group[0].question_id
            self.offsets[group_id] = offset
            if self.in_request_order:
                self.requested.append((batch_id_of(group_id), group_id))

    def next_batch_id(self) -> str:
        self.requests += 1
        return f"{self.segment}-{self.requests}"

    def collect(self, learner_version: Callable[[], int]) -> Collected:
        """Groups for the learner at ``learner_version()``, read again on every round: the version can
        move while collecting (a rebuilt learner publishes), and a group taken earlier that became too
        old is dropped then, so the bound holds when the step trains."""
        wanted = self.staleness.groups_per_step
        target, taken, refills, dropped = wanted, [], 0, 0
        progress_at = time.monotonic()
        while True:
            while len(taken) < target:
                self._release_given_up()  # a poll outside the step (a validation's) may have given some up
                self._admit()
                oldest = max(self.staleness.oldest_usable(learner_version()), self.floor)
                dropped += self._read_store(oldest)
                fresh = [group for group in taken if group[0].policy_version >= oldest]
                dropped += self._drop(len(taken) - len(fresh))
                new = self._take(target - len(fresh))
                taken = fresh + new
                if new:
                    progress_at = time.monotonic()
                if len(taken) == target:
                    useful = sum(has_signal(members, self.filter_zero_spread)
                                 for group in taken for members in scored_groups(group).values())
                    if useful < wanted and refills < self.refill_rounds:
                        refills += 1
                        target += wanted - useful
                        self.staleness.discard(wanted - useful)
                elif len(taken) < target:
                    if not self.feed.busy and self.staleness.capacity() == 0 and not self._awaiting_listing():
                        raise RuntimeError(f"rollouts stalled: {len(taken)} of {target} groups, none in flight "
                                           f"({self.staleness})")
                    if time.monotonic() - progress_at > self.stall_timeout_s:
                        raise RuntimeError(f"no rollout group arrived for {self.stall_timeout_s:g}s (an actor that "
                                           f"never comes back?); {self.feed.counters.given_up} request(s) given up")
                    self._wait()
            self._settle()
            # settling can rebuild the learner (on_wait's actor care), which raises the floor: check again
            oldest = max(self.staleness.oldest_usable(learner_version()), self.floor)
            fresh = [group for group in taken if group[0].policy_version >= oldest]
            if len(fresh) == len(taken):
                break
            dropped += self._drop(len(taken) - len(fresh))
            taken = fresh
            progress_at = time.monotonic()  # settling may have taken minutes: the stall clock starts again
        return Collected(sorted(taken, key=lambda group: request_order(group[0])), dropped, refills)

    def _settle(self, timeout_s: float = SETTLE_TIMEOUT_S) -> None:
        """The step's groups are taken (``in_request_order`` only): wait until the requests still in flight have
        drawn their Conductor completions. No request is admitted again before the step publishes, so each was
        sampled at the version it was admitted under, however long the step trains. Past ``timeout_s`` the step
        goes on, counted (``unsettled_publishes``). A rollback or a rebuilt learner ends the replay: which
        groups in flight it makes too old, and when each is seen, is timing again."""
        if self.in_request_order and not self.feed.wait_sampled(timeout_s, on_wait=self.on_wait):
            self.count("unsettled_publishes", 1)

    def _take(self, count: int) -> list[Group]:
        """Up to ``count`` groups: the oldest arrived, or (``in_request_order``) the next requested ones that
        have arrived, stopping at the first still out. A group its request stored is waited for until the
        store lists it (a listing may lag the write); one its finished request did not store will not come:
        its place is freed."""
        if not self.in_request_order:
            taken = self.buffer.take(count)
            self._forget(group[0].group_id for group in taken)
            return taken
        taken = []
        while len(taken) < count and self.requested:
            batch_id, group_id = self.requested[0]
            group = self.buffer.pop(group_id)
            if group is None and (batch_id not in self.feed.came_back or not self.feed.take_unstored(group_id)):
                break  # still out, or stored and not yet listed (a store's listing may lag its write)
            self.requested.popleft()
            self.outstanding.pop(group_id, None)
            if group is None:
                self.staleness.discard(1)
            else:
                taken.append(group)
        return taken

    def _awaiting_listing(self) -> bool:
        """In request order: the next group came back stored, and the store does not list it yet."""
        return self.in_request_order and bool(self.requested) and self.requested[0][0] in self.feed.came_back

    def _forget(self, group_ids: Iterable[str]) -> None:
        """Groups taken, dropped or given up: no step waits for them, and a resumed run does not draw them again."""
        gone = set(group_ids)
        for group_id in gone:
            self.outstanding.pop(group_id, None)
        if gone and self.in_request_order:
            self.requested = deque(entry for entry in self.requested if entry[1] not in gone)

    def _admit(self) -> None:
        """Issue requests while the staleness bound allows, spread over the rollout actors."""
        while (capacity := self.staleness.capacity()) > 0:
            count = min(self.questions_per_batch, max(1, -(-capacity // len(self.feed.actors))), capacity)
            key = request_key(self.sampler.state())  # before the draw: what a re-run draws these questions at
            request = RolloutRequest(self.next_batch_id(), tuple(self.sampler.next(count)), draw_key=key)
            self.feed.submit(request)
            self.staleness.start(count)
            self.outstanding.update(zip(request.group_ids(), (task.id for task in request.tasks)))
            if self.in_request_order:
                self.requested.extend((request.batch_id, group_id) for group_id in request.group_ids())

    def _read_store(self, oldest: int) -> int:
        """New groups of this segment into the buffer; drops (and returns the count of) those sampled
        before version ``oldest``."""
        table, self.cursor = self.store.read(min_version=self.first_version, cursor=self.cursor)
        records = from_table(table)
        orphans = {record.group_id for record in records} & self.given_up_groups  # written after the give-up
        if orphans:
            self.count("orphaned_groups_ignored", len(orphans))
        # In request order, not file-name order, so that one seed trains on the same batches every time.
        self.buffer.add(sorted((record for record in records if record.group_id not in orphans), key=request_order))
        stale = self.buffer.drop_older_than(oldest)
        self._forget(group[0].group_id for group in stale)
        return self._drop(len(stale))

    def _drop(self, groups: int) -> int:
        if groups:
            self.staleness.discard(groups)
            self.count("stale_groups_dropped", groups)
        return groups

    def _wait(self) -> None:
        self.feed.poll(timeout_s=POLL_S)
        self._release_given_up()
        self.on_wait()

    def _release_given_up(self) -> None:
        """Requests the feed gave up: their places are freed for others, and their groups are not waited for."""
        for request in self.feed.take_given_up():
            self.staleness.discard(len(request.tasks))
            self._forget(request.group_ids())
            self.given_up_groups.update(request.group_ids())
            for group_id in request.group_ids():  # written before it was given up, not yet taken
                self.buffer.pop(group_id)
            self.count("rollout_requests_failed", 1)


def request_order(record: RolloutRecord) -> tuple:
    """Version, then request number, question and sample ("{segment}-10-q2-s0" after "{segment}-9-q2-s0")."""
    within_segment = record.rollout_id.partition("-")[2]
    return (record.policy_version, *(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", within_segment)))
