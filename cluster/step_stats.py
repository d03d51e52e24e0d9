"""What one GRPO step produced, typed: the sampled rollouts' numbers, the learner's, the batch's, the
staleness of what was trained, and the phase timings. ``row()`` flattens it once, for the log line, the
history in ``trainer_state.json`` and the dashboard gauges (keep its keys stable: tools read them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import RolloutStats
from learner.train_batch import BatchStats, LearnerStats


@dataclass(frozen=True)
class StalenessStats:
    """Of the records trained this step: how many versions behind the learner they were."""

    max_lag: int
    mean_lag: float
    stale_groups_dropped: int     # read this step but too old to train on
    refill_rounds: int            # extra rollout rounds for groups without reward spread

    @classmethod
    def of(cls, records: Sequence[RolloutRecord], learner_version: int, dropped: int,
           refills: int) -> StalenessStats:
        lags = [learner_version - r.policy_version for r in records] or [0]
        return cls(max_lag=max(lags), mean_lag=sum(lags) / len(lags), stale_groups_dropped=dropped,
                   refill_rounds=refills)


@dataclass(frozen=True)
class StepStats:
    step: int
    version: int                  # the policy version published after this step
    rollouts: RolloutStats
    learner: LearnerStats
    batch: BatchStats
    staleness: StalenessStats
    timings: dict[str, float]     # seconds: rollout (waiting for groups), train, sync, step

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"step": self.step, "version": self.version}
        row.update(self.rollouts.as_dict())
        learner = dataclasses.asdict(self.learner)
        row.update({f"learner_{phase}_s": seconds for phase, seconds in learner.pop("timings").items()})
        row.update(learner)
        row.update(zero_spread_groups=self.batch.zero_spread_groups, trained_sequences=self.batch.sequences)
        row.update(dataclasses.asdict(self.staleness))
        row.update({f"{phase}_s": seconds for phase, seconds in self.timings.items()})
        return row
