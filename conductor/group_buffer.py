"""Rollout groups read from the replay store and not yet trained on, oldest policy version first.

A group is one question's G samples; they come from one generation call, so they share a version and a
store file. The buffer keeps groups whole and in (version, arrival) order, drops the ones too stale to
train on, and hands out the oldest first, which is what keeps the staleness bound cheap to hold.
"""

from __future__ import annotations

from collections.abc import Iterable

from conductor.rollout_record import RolloutRecord

Group = list[RolloutRecord]


class GroupBuffer:
    def __init__(self) -> None:
        self._groups: dict[str, Group] = {}

    def add(self, records: Iterable[RolloutRecord]) -> int:
        """Add records; returns the number of new groups. A rollout id seen before is ignored."""
        before = len(self._groups)
        for record in records:
            members = self._groups.setdefault(record.group_id, [])
            if all(member.rollout_id != record.rollout_id for member in members):
                members.append(record)
        return len(self._groups) - before

    def drop_older_than(self, version: int) -> list[Group]:
        """Remove and return the groups sampled before ``version``."""
        stale = [gid for gid, members in self._groups.items() if members[0].policy_version < version]
        return [self._groups.pop(gid) for gid in stale]

    def take(self, count: int) -> list[Group]:
        """Remove and return up to ``count`` groups, oldest version first (stable within a version)."""
        order = sorted(self._groups, key=lambda gid: self._groups[gid][0].policy_version)[:max(0, count)]
        return [self._groups.pop(gid) for gid in order]

    def pop(self, group_id: str) -> Group | None:
        """Remove and return the group ``group_id``; None when it has not arrived."""
        return self._groups.pop(group_id, None)

    def __len__(self) -> int:
        return len(self._groups)
