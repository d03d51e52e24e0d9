"""What one GRPO step produced, typed: the sampled rollouts' numbers, the learner's, the batch's, the
staleness of what was trained, and the phase timings. ``row()`` flattens it once, for the log line, the
history in ``trainer_state.json`` and the dashboard gauges (keep its keys stable: tools read them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import RolloutStats
from learner.train_batch import BatchStats, LearnerStats


def node_memory_gb() -> float:
    """Memory in use on the driver's node, GB: on a node of its own, the run's footprint (driver, engines,
    learners, actors and Ray's object store together), which no single process's RSS shows."""
    import psutil

    return psutil.virtual_memory().used / 1e9


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
    node_memory_gb: float = dataclasses.field(default_factory=node_memory_gb)  # when the step ended
    token_multiplier: Optional[float] = None  # the token budget's lambda for the next step (reward.worker_token_budget)

    def row(self) -> dict[str, Any]:
        row: dict[str, Any] = {"step": self.step, "version": self.version, "node_memory_gb": self.node_memory_gb}
        row.update(self.rollouts.as_dict())
        learner = dataclasses.asdict(self.learner)
        row.update({f"learner_{phase}_s": seconds for phase, seconds in learner.pop("timings").items()})
        row.update(learner)
        row.update(zero_spread_groups=self.batch.zero_spread_groups, trained_sequences=self.batch.sequences)
        row.update(dataclasses.asdict(self.staleness))
        row.update({f"{phase}_s": seconds for phase, seconds in self.timings.items()})
        if self.token_multiplier is not None:
            row["token_multiplier"] = self.token_multiplier
        return row


def run_throughput(history: Sequence[dict[str, Any]], grpo_seconds: float) -> dict[str, Any]:
    """Figures of the whole run from its per-step rows: the node's memory peak and the Conductor tokens
    sampled per second of GRPO wall time."""
    tokens = sum(row.get("conductor_tokens_per_rollout", 0.0) * row.get("rollouts", 0) for row in history)
    return {"node_memory_peak_gb": max((row.get("node_memory_gb", 0.0) for row in history), default=None),
            "conductor_tokens_per_s": tokens / grpo_seconds if grpo_seconds > 0 else None}
