"""Admission control for asynchronous GRPO: start only as many rollout groups as the learner can consume
while they are at most ``max_staleness`` policy versions old.

Counted in groups (one question's G samples, sampled by one engine at one version). With Q the groups
a step trains on, k = ``max_staleness``, s the versions published since the run (segment) began,
``started`` the groups ever admitted and ``discarded`` the groups consumed without counting toward a
step (too stale, or without reward spread and replaced by a refill):

    admit n more groups  iff  (started - discarded) + n  <=  min(s + k + 1, N) * Q

with N the steps the segment has left to train when it begins (``steps``; unbounded when not given).

Why this bounds staleness: the learner consumes Q counted groups per step, oldest version first, so the
j-th counted group (from 0) is trained at step floor(j / Q), when the learner's version is
v0 + floor(j / Q). It was admitted when (s + k + 1) * Q > j, i.e. s >= floor(j / Q) - k, and the engines
carried version v0 + s then (weights are published before admissions that count on them), so it is at
most k versions behind when trained. k = 0 is the synchronous loop: Q groups at version v, train,
publish, Q groups at v + 1. A group that completes late (a slow worker call, a re-issued request) can
still arrive more than k behind; the learner drops it on reading (``discard``), which frees its place,
so the bound holds for every consumed record, not only on average.

Why N: the j-th counted group is trained at the segment's step floor(j / Q), so one with j >= N * Q would
never be trained, only paid for (its Conductor samples and worker calls). Without N an async run's last
steps admit up to k * Q such groups. A run stopped before its last step (the spend cap) still has up to
k * Q admitted ahead, and a resumed run trains them (cluster/pending_groups.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass
class StalenessManager:
    groups_per_step: int         # Q
    max_staleness: int           # k
    steps: Optional[int] = None  # N: the steps this segment has left to train
    published: int = 0           # s: versions published since this segment began
    started: int = 0
    discarded: int = 0

    def __post_init__(self) -> None:
        if self.groups_per_step < 1 or self.max_staleness < 0:
            raise ValueError("groups_per_step must be >= 1 and max_staleness >= 0")
        if self.steps is not None and self.steps < 0:
            raise ValueError("steps must be >= 0")

    def capacity(self) -> int:
        """Groups that may be admitted now."""
        versions = self.published + self.max_staleness + 1
        if self.steps is not None:
            versions = min(versions, self.steps)
        return max(0, versions * self.groups_per_step - (self.started - self.discarded))

    def start(self, groups: int) -> None:
        if groups > self.capacity():
            raise RuntimeError(f"admitting {groups} groups exceeds the staleness capacity {self.capacity()}")
        self.started += groups

    def discard(self, groups: int) -> None:
        """Groups read but not counted toward a step: each frees one admission."""
        self.discarded += groups

    def publish(self) -> None:
        """A new policy version reached the engines."""
        self.published += 1

    def oldest_usable(self, learner_version: int) -> int:
        """The oldest policy version a record trained at ``learner_version`` may carry."""
        return learner_version - self.max_staleness
