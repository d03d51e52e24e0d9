"""The training signal: format_error (unparseable workflow) <= wrong < correct, minus optional cost
penalties on well-formed episodes, floored at ``format_error``:

    r = format_error                                                unparseable
      = max(base - lambda_usd * $ - lambda_tok * max(T - T_free, 0) / 1000, format_error)
                                                                    base = correct or wrong

where T is the episode's worker tokens (in + out, every step) and T_free a per-question budget the token
penalty does not charge (default 0). The two penalties pull differently: a $
penalty moves a policy to cheap workers, which are often the verbose ones (a lambda_usd 0.5 run kept its
3-step chains on the cheapest workers); a token penalty moves it to fewer and shorter calls, which is what
a token budget (and latency) asks for.

A plain token penalty prices a token alike in every domain, so the domain where a second step buys least
drops it first, whatever the budget (paper-7 at lambda_tok 0.03: MMLU went to one step at 0.18x MoA's
tokens). With T_free set to the budget, every workflow inside it is free and the penalty only pushes the
ones above it down to it.

The floor keeps the order under any lambda: unfloored, an expensive wrong answer scored below writing
nothing parseable at all, and a cost-penalised run learned to stop writing workflows (format 0.98 -> 0.03
in 60 steps at lambda 2 with wrong = format_error = 0). Episodes with an infrastructure error get no
reward: they are excluded from training rather than scored as wrong."""

from __future__ import annotations

from typing import Optional

from conductor.config import RewardConfig


def reward(*, format_ok: bool, correct: bool, cost_usd: float, worker_tokens: int, infra_error: bool,
           settings: Optional[RewardConfig] = None) -> Optional[float]:
    settings = settings or RewardConfig()
    if infra_error:
        return None
    if not format_ok:
        return settings.format_error
    base = settings.correct if correct else settings.wrong
    penalty = (settings.cost_penalty_per_usd * cost_usd
               + settings.cost_penalty_per_1k_worker_tokens
               * max(worker_tokens - settings.penalty_free_worker_tokens, 0) / 1000)
    return max(base - penalty, settings.format_error)
