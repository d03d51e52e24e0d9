"""The training signal: format_error (unparseable workflow) <= wrong < correct, minus an optional cost
penalty ``lambda * $`` on well-formed episodes, floored at ``format_error``:

    r = format_error                                   unparseable
      = max(base - lambda * $, format_error)           base = correct or wrong

The floor keeps the order under any lambda: unfloored, an expensive wrong answer scored below writing
nothing parseable at all, and a cost-penalised run learned to stop writing workflows (format 0.98 -> 0.03
in 60 steps at lambda 2 with wrong = format_error = 0). Episodes with an infrastructure error get no
reward: they are excluded from training rather than scored as wrong."""

from __future__ import annotations

from typing import Optional

from conductor.config import RewardConfig


def reward(*, format_ok: bool, correct: bool, cost_usd: float, infra_error: bool,
           settings: Optional[RewardConfig] = None) -> Optional[float]:
    settings = settings or RewardConfig()
    if infra_error:
        return None
    if not format_ok:
        return settings.format_error
    base = settings.correct if correct else settings.wrong
    return max(base - settings.cost_penalty_per_usd * cost_usd, settings.format_error)
