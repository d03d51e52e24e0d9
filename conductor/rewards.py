"""The training signal: format_error (unparseable workflow) < wrong < correct, minus an optional cost
penalty ``lambda * $``. Episodes with an infrastructure error get no reward: they are excluded from
training rather than scored as wrong."""

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
    return base - settings.cost_penalty_per_usd * cost_usd
