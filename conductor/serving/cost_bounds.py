"""What a workflow can cost at most, known before any worker is called, so a cost cap is kept before the
money is spent rather than noticed after.

Step i's bound: its prompt at most ``P_i`` tokens, its reply at most ``M_i`` (the ``max_tokens`` it is
called with, which the provider enforces), priced at the worker's rates:

    bound_i = P_i * price_in + M_i * price_out
    P_i     = ceil(chars_i / 3) + 8 * messages_i + sum of M_j over the steps j it sees

where ``chars_i`` counts the question, the subtasks it is shown and, in a repair round, the previous final
turn. Three characters per token over-counts English and code for every common tokenizer (about four
is typical), so the bound holds unless a provider counts more tokens than that. A workflow is cut to its
longest prefix whose bounds fit the budget (access lists only name earlier steps, so a prefix is a valid
workflow; its last step answers).
"""

from __future__ import annotations

import math
from typing import Optional

from conductor.config import WorkerSpec
from conductor.roster import Roster
from conductor.workflow import ALL, Workflow

CHARS_PER_TOKEN_BOUND = 3
TOKENS_PER_MESSAGE_BOUND = 8


def step_max_tokens(worker: WorkerSpec, answer_max_tokens: Optional[int], final: bool) -> int:
    """The reply limit a step is called with: the worker's, and for the last step the request's too."""
    limit = worker.sampling.max_tokens
    return min(limit, answer_max_tokens) if final and answer_max_tokens else limit


def price(worker: WorkerSpec, prompt_tokens: int, completion_tokens: int) -> float:
    return (prompt_tokens * (worker.price_in_per_m or 0.0) + completion_tokens * (worker.price_out_per_m or 0.0)) / 1e6


def workflow_bounds(workflow: Workflow, roster: Roster, question: str, *, answer_max_tokens: Optional[int] = None,
                    previous_final_chars: int = 0) -> list[float]:
    """The cost bound of each step, were the workflow to end at that step."""
    workers = [roster.workers[step.worker] for step in workflow.steps]
    bounds = []
    for index, step in enumerate(workflow.steps):
        visible = step.visible_steps(index)
        final = index == len(workflow.steps) - 1
        chars = len(question) + len(step.subtask) + sum(len(workflow.steps[j].subtask) for j in visible)
        if step.access == ALL:
            chars += previous_final_chars
        seen = sum(step_max_tokens(workers[j], answer_max_tokens, False) for j in visible)
        prompt = math.ceil(chars / CHARS_PER_TOKEN_BOUND) + TOKENS_PER_MESSAGE_BOUND * (2 * len(visible) + 3) + seen
        bounds.append(price(workers[index], prompt, step_max_tokens(workers[index], answer_max_tokens, final)))
    return bounds


def cut_to_budget(workflow: Workflow, roster: Roster, question: str, budget: Optional[float], *,
                  answer_max_tokens: Optional[int] = None, previous_final_chars: int = 0,
                  ) -> tuple[Workflow, float]:
    """The longest prefix whose bound fits ``budget`` (all of it when there is no budget) and that bound.
    An empty workflow means not even its first step fits."""
    for length in range(len(workflow.steps), 0, -1):
        prefix = Workflow(workflow.steps[:length])
        total = sum(workflow_bounds(prefix, roster, question, answer_max_tokens=answer_max_tokens,
                                    previous_final_chars=previous_final_chars))
        if budget is None or total <= budget:
            return prefix, total
    return Workflow(()), 0.0
