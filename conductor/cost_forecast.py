"""What a training run will cost in all, forecast from what its steps have cost so far, with a range.

Per step the driver measures, by provider, what the pool spent during the GRPO step (its rollouts, trained
or dropped, and their judge calls) and, apart, during each validation (conductor/spend_meter.py). From
``n`` of ``N`` steps done, with ``S`` spent so far (every segment, the held-out baselines included):

    m, s  = mean and sample standard deviation of the last FORECAST_STEPS step costs
    r     = N - n                      steps left
    V     = validations left           (every train.eval_every steps and after the last; step n's own among
                                        them: the forecast is made between a step and its validation)
    v     = the last validation's cost (none yet: q x validation questions)
    q     = the evaluation cost per question: the last validation's / its questions (none yet: m / rollouts
            per step: a sampled rollout costs about what a greedy answer does)
    h     = q x held-out questions     (the closing held-out evaluation of the best policy)
    rest  = r m + V v + h
    mid   = S + rest,   low = S + rest (1 - s/m),   high = S + rest (1 + s/m)

The range applies the per-step cost's relative spread to everything left, not its standard error over
``r`` steps (which shrinks as 1/sqrt(r)): the per-step cost drifts as the policy changes which workers it
asks and how many, and a band one spread wide covers a drift of the mean by that much. Before two steps
there is no spread: no forecast. Ray-free; the stop rule that reads the same figures: conductor/spend_cap.py.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from conductor.spend_meter import ByProvider, add

FORECAST_STEPS = 10
MIN_STEPS = 2


def scaled(costs: Mapping[str, float], factor: float) -> ByProvider:
    return {provider: usd * factor for provider, usd in costs.items()}


def mean_of(costs: Sequence[Mapping[str, float]]) -> ByProvider:
    return scaled(add(*costs), 1 / len(costs)) if costs else {}


@dataclass(frozen=True)
class RunShape:
    """What the rest of a run will do: the configured steps and the questions its evaluations score."""

    steps: int
    eval_every: int
    val_questions: int
    heldout_questions: int
    rollouts_per_step: int
    max_staleness: int = 0

    def validates_after(self, step: int) -> bool:
        """As cluster/grpo_recipe.py validates: every ``eval_every`` steps and after the last."""
        return step % self.eval_every == 0 or step == self.steps

    def steps_admitted_beside(self, step: int) -> int:
        """The later steps whose rollouts are admitted while ``step`` trains (conductor/staleness.py)."""
        return max(0, min(self.max_staleness, self.steps - step))

    def validations_left(self, done: int) -> int:
        """Those still to run once step ``done`` has trained: its own among them, since the forecast is made
        between a step and its validation (cluster/run_spend.py, step_row)."""
        return sum(self.validates_after(step) for step in range(max(done, 1), self.steps + 1))


@dataclass(frozen=True)
class CostHistory:
    """The measured cost of each step (validation apart) and of each validation, by provider, oldest first."""

    steps: tuple[ByProvider, ...] = ()
    validations: tuple[ByProvider, ...] = ()

    @classmethod
    def of(cls, history: Sequence[Mapping[str, Any]], evals: Sequence[Mapping[str, Any]]) -> CostHistory:
        """From the driver's step rows and validation rows (rows from before costs were measured are skipped)."""
        return cls(tuple(dict(row["step_cost_by_provider"]) for row in history if "step_cost_by_provider" in row),
                   tuple(dict(row["val_cost_by_provider"]) for row in evals if "val_cost_by_provider" in row))


def per_question_eval_cost(history: CostHistory, shape: RunShape) -> ByProvider:
    if history.validations and shape.val_questions:
        return scaled(history.validations[-1], 1 / shape.val_questions)
    return scaled(mean_of(history.steps[-FORECAST_STEPS:]), 1 / max(1, shape.rollouts_per_step))


def validation_estimate(history: CostHistory, shape: RunShape) -> ByProvider:
    if history.validations:
        return dict(history.validations[-1])
    return scaled(per_question_eval_cost(history, shape), shape.val_questions)


def heldout_estimate(history: CostHistory, shape: RunShape) -> ByProvider:
    return scaled(per_question_eval_cost(history, shape), shape.heldout_questions)


@dataclass(frozen=True)
class Forecast:
    step: int
    spent: float
    low: float
    mid: float
    high: float

    def row(self) -> dict[str, float]:
        """The step row's (and dashboard's) forecast figures."""
        return {"forecast_usd": self.mid, "forecast_low_usd": self.low, "forecast_high_usd": self.high}


def forecast(spent: float, history: CostHistory, done: int, shape: RunShape) -> Optional[Forecast]:
    """The run's total cost after ``done`` steps (formula in the module docstring); None before MIN_STEPS."""
    recent = [sum(costs.values()) for costs in history.steps[-FORECAST_STEPS:]]
    if len(recent) < MIN_STEPS:
        return None
    mean, spread = statistics.fmean(recent), statistics.stdev(recent)
    relative = spread / mean if mean > 0 else 0.0
    left = max(0, shape.steps - done)
    rest = (left * mean + shape.validations_left(done) * sum(validation_estimate(history, shape).values())
            + sum(heldout_estimate(history, shape).values()))
    return Forecast(done, spent, spent + max(0.0, rest * (1 - relative)), spent + rest, spent + rest * (1 + relative))
