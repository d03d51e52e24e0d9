"""The training signal: format_error (unparseable workflow) <= wrong < correct, minus optional cost
penalties on well-formed episodes, floored at ``format_error``:

    r = format_error                                                unparseable
      = max(base - lambda_usd * $ - lambda_tok * max(T - T_free, 0) / 1000, format_error)
                                                                    base = correct or wrong, or
                                                                    wrong + s * (correct - wrong)

where T is the episode's worker tokens (in + out, every step) and T_free a per-question budget the token
penalty does not charge (default 0). The two penalties pull differently: a $
penalty moves a policy to cheap workers, which are often the verbose ones (a lambda_usd 0.5 run kept its
3-step chains on the cheapest workers); a token penalty moves it to fewer and shorter calls, which is what
a token budget (and latency) asks for.

A graded verdict s in [0, 1] (a user's Python reward, conductor/verifiers/python_reward.py) moves the
base linearly from wrong (s = 0) to correct (s = 1): a well-formed answer never scores below a wrong one
or above a correct one, whatever the function returns.

A plain token penalty prices a token alike in every domain, so the domain where a second step buys least
drops it first, whatever the budget (paper-7 at lambda_tok 0.03: MMLU went to one step at 0.18x MoA's
tokens). With T_free set to the budget, every workflow inside it is free and the penalty only pushes the
ones above it down to it.

The floor keeps the order under any lambda: unfloored, an expensive wrong answer scored below writing
nothing parseable at all, and a cost-penalised run learned to stop writing workflows (format 0.98 -> 0.03
in 60 steps at lambda 2 with wrong = format_error = 0). Episodes with an infrastructure error get no
reward: they are excluded from training rather than scored as wrong.

With a cost dial (``cost_weight_range``, conductor/cost_dial.py) lambda_usd is each question's drawn weight
rather than one number for the run."""

from __future__ import annotations

from typing import Optional

from pydantic import Field, field_validator, model_validator

from conductor.config_section import Section
from conductor.cost_dial import check_setting


class RewardConfig(Section):
    format_error: float = 0.0
    wrong: float = 0.5
    correct: float = 1.0
    cost_penalty_per_usd: float = Field(default=0.0, ge=0.0, description="lambda_usd in reward - lambda_usd * $")
    cost_penalty_per_1k_worker_tokens: float = Field(
        default=0.0, ge=0.0, description="lambda_tok in reward - lambda_tok * max(T - T_free, 0) / 1000")
    penalty_free_worker_tokens: int = Field(
        default=0, ge=0, description="T_free: worker tokens per episode the token penalty does not charge (a budget)")
    worker_token_budget: Optional[float] = Field(
        default=None, gt=0, description="hold sampled worker tokens per question (averaged over domains) at or "
        "under this in training: the token penalty's lambda becomes a multiplier that rises while the policy "
        "spends more and falls while it spends less (conductor/token_budget.py); lambda_0 is "
        "cost_penalty_per_1k_worker_tokens")
    budget_multiplier_rate: float = Field(default=0.02, gt=0, description="lambda's change per step per 1k "
                                          "tokens over (or under) worker_token_budget")
    budget_multiplier_max: float = Field(default=0.5, gt=0, description="lambda's ceiling")
    cost_weight_range: Optional[tuple[float, float]] = Field(
        default=None, description="[lo, hi]: train one policy with a cost dial (conductor/cost_dial.py): each "
        "question's lambda_usd is drawn from this range, lo at cost_quality 10 (best) and hi at 0 (cheapest), and "
        "its prompt states the setting; null: no dial")
    cost_quality_settings: list[int] = Field(
        default_factory=lambda: list(range(11)), min_length=1, description="with cost_weight_range: the settings "
        "drawn from, uniformly, one per GRPO group")

    @field_validator("cost_quality_settings")
    @classmethod
    def _settings(cls, settings: list[int]) -> list[int]:
        return sorted({check_setting(s, "reward.cost_quality_settings") for s in settings})

    @model_validator(mode="after")
    def _ordered(self) -> RewardConfig:
        if not self.format_error <= self.wrong < self.correct:
            raise ValueError(f"rewards must keep format_error <= wrong < correct; got {self.format_error}, "
                             f"{self.wrong}, {self.correct}")
        if self.cost_weight_range is not None:
            lo, hi = self.cost_weight_range
            if not 0 <= lo <= hi:
                raise ValueError(f"reward.cost_weight_range must be [lo, hi] with 0 <= lo <= hi; got [{lo}, {hi}]")
            if self.cost_penalty_per_usd:
                raise ValueError("reward.cost_weight_range draws each question's lambda_usd: leave "
                                 "reward.cost_penalty_per_usd at 0")
        return self


def reward(*, format_ok: bool, correct: bool, cost_usd: float, worker_tokens: int, infra_error: bool,
           settings: Optional[RewardConfig] = None, score: Optional[float] = None,
           cost_weight: Optional[float] = None) -> Optional[float]:
    """``score``: a graded verdict in [0, 1], which then stands in for ``correct``. ``cost_weight``: this
    question's lambda_usd, drawn by the cost dial (None: ``cost_penalty_per_usd``)."""
    settings = settings or RewardConfig()
    if infra_error:
        return None
    if not format_ok:
        return settings.format_error
    if score is not None:
        base = settings.wrong + score * (settings.correct - settings.wrong)
    else:
        base = settings.correct if correct else settings.wrong
    usd_price = settings.cost_penalty_per_usd if cost_weight is None else cost_weight
    penalty = (usd_price * cost_usd
               + settings.cost_penalty_per_1k_worker_tokens
               * max(worker_tokens - settings.penalty_free_worker_tokens, 0) / 1000)
    return max(base - penalty, settings.format_error)
