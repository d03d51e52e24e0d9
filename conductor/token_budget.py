"""A worker-token budget held during training by a Lagrange multiplier (constrained RL, the dual ascent of
PPO-Lagrangian) instead of a fixed price per token:

    reward_i       = reward(format_i, correct_i, tokens_i; cost_penalty_per_1k_worker_tokens = lambda_t)
    lambda_{t + 1} = clip(lambda_t + rate * (T_t - budget) / 1000, 0, max_multiplier)

T_t is the step's sampled worker tokens per question, each domain's mean averaged over domains, as the
evaluation report's tokens column. lambda_0 is ``reward.cost_penalty_per_1k_worker_tokens``. A fixed price
lands either side of a budget from run to run (paper-7 at lambda 0.03: 0.18-0.22x MoA's tokens,
docs/experiments.md, "where a second step pays"); the multiplier rises while the sampled workflows spend
over the budget and falls back while they spend under it, so the penalty is only as large as the budget
needs. Rewards are priced again at training time (the rollout actors price them with lambda_0; the replay
store keeps that)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from conductor.rewards import RewardConfig, reward
from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import domain_mean, worker_tokens


@dataclass
class TokenBudget:
    settings: RewardConfig
    budget: float
    multiplier: float

    @classmethod
    def of(cls, settings: RewardConfig, multiplier: Optional[float] = None) -> Optional[TokenBudget]:
        """None without ``reward.worker_token_budget``; ``multiplier``: a resumed run's."""
        if settings.worker_token_budget is None:
            return None
        return cls(settings, settings.worker_token_budget,
                   settings.cost_penalty_per_1k_worker_tokens if multiplier is None else multiplier)

    def reprice(self, records: Sequence[RolloutRecord]) -> list[RolloutRecord]:
        """The records with their rewards at the current multiplier (infrastructure errors stay unscored)."""
        priced = self.settings.model_copy(update={"cost_penalty_per_1k_worker_tokens": self.multiplier})
        return [dataclasses.replace(r, reward=reward(
            format_ok=r.format_ok, correct=r.correct, cost_usd=r.cost_usd, worker_tokens=worker_tokens(r),
            infra_error=r.infra_error is not None, settings=priced, score=r.score, cost_weight=r.cost_weight))
            for r in records]

    def update(self, records: Sequence[RolloutRecord]) -> float:
        """One dual step on a training step's records; returns the tokens it measured. An infrastructure error's
        episode stopped partway (its tokens say nothing of what the policy spends): left out, as from the loss."""
        scored = [r for r in records if r.infra_error is None]
        if not scored:
            return 0.0
        spent = domain_mean(scored, worker_tokens)
        step = self.settings.budget_multiplier_rate * (spent - self.budget) / 1000
        self.multiplier = min(max(self.multiplier + step, 0.0), self.settings.budget_multiplier_max)
        return spent

    def step(self, records: Sequence[RolloutRecord]) -> list[RolloutRecord]:
        """A training step: its records priced at the current multiplier, which their spend then moves."""
        priced = self.reprice(records)
        self.update(priced)
        return priced
