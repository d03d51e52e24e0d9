"""What a workflow can cost at most, known before any worker is called, so a cost cap is kept before the
money is spent rather than noticed after.

Step i's bound: its prompt at most ``P_i`` tokens, its reply at most ``M_i`` (the ``max_tokens`` it is
called with, which the provider enforces), priced at the worker's rates:

    bound_i = P_i * price_in + M_i * price_out
    P_i     = ceil(ascii_i / 3) + bytes_i + 8 * messages_i + sum of M_j over the steps j it sees

over the text step i is shown (the question, the subtasks it sees and, in a repair round, the previous final
turn: its subtask and its answer, two more messages): ``ascii_i`` its ASCII characters, ``bytes_i`` the UTF-8
bytes of the rest. Three ASCII characters a token over-counts English and code for every common tokenizer
(about four is typical); other scripts take up to a token a byte (Chinese, Hindi: a byte-level tokenizer gives
2-4 tokens a character), and no byte-level or byte-fallback tokenizer makes more tokens than bytes. So the
bound holds unless a provider counts more tokens than that. A workflow is cut to its longest prefix whose
bounds fit the budget (access lists only name earlier steps, so a prefix is a valid workflow; its last step
answers).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

from conductor.config import WorkerSpec
from conductor.executor import Turn
from conductor.provider_client import price
from conductor.roster import Roster
from conductor.workflow import ALL, Workflow

CHARS_PER_TOKEN_BOUND = 3
TOKENS_PER_MESSAGE_BOUND = 8


@functools.lru_cache(maxsize=256)
def text_tokens_bound(text: str) -> int:
    """At most this many tokens for ``text``: a third of its ASCII characters, and a token a byte of the rest.
    Cached: a workflow's cut asks again for the same question and subtasks at every prefix it tries."""
    ascii_chars = len(text.encode("ascii", "ignore"))
    other_bytes = len(text.encode("utf-8", "surrogatepass")) - ascii_chars
    return math.ceil(ascii_chars / CHARS_PER_TOKEN_BOUND) + other_bytes


def step_max_tokens(worker: WorkerSpec, answer_max_tokens: Optional[int], final: bool) -> int:
    """The reply limit a step is called with: the worker's, and for the last step the request's too."""
    limit = worker.sampling.max_tokens
    return min(limit, answer_max_tokens) if final and answer_max_tokens else limit


def workflow_bounds(workflow: Workflow, roster: Roster, question: str, *, answer_max_tokens: Optional[int] = None,
                    previous_final: Optional[Turn] = None) -> list[float]:
    """The cost bound of each step, were the workflow to end at that step. ``previous_final``: the previous
    round's final turn (its subtask and response), which a step with access "all" is sent as two messages."""
    workers = [roster.workers[step.worker] for step in workflow.steps]
    subtask_tokens = [text_tokens_bound(step.subtask) for step in workflow.steps]
    shared = text_tokens_bound(question)
    previous = sum(map(text_tokens_bound, previous_final)) if previous_final else 0
    bounds = []
    for index, step in enumerate(workflow.steps):
        visible = step.visible_steps(index)
        final = index == len(workflow.steps) - 1
        text = shared + subtask_tokens[index] + sum(subtask_tokens[j] for j in visible)
        turns = len(visible)
        if step.access == ALL and previous_final:
            text, turns = text + previous, turns + 1
        seen = sum(step_max_tokens(workers[j], answer_max_tokens, False) for j in visible)
        prompt = text + TOKENS_PER_MESSAGE_BOUND * (2 * turns + 3) + seen
        bounds.append(price(workers[index], prompt, step_max_tokens(workers[index], answer_max_tokens, final)))
    return bounds


def cut_to_budget(workflow: Workflow, roster: Roster, question: str, budget: Optional[float], *,
                  answer_max_tokens: Optional[int] = None, previous_final: Optional[Turn] = None,
                  ) -> tuple[Workflow, float]:
    """The longest prefix whose bound fits ``budget`` (all of it when there is no budget) and that bound.
    An empty workflow means not even its first step fits."""
    for length in range(len(workflow.steps), 0, -1):
        prefix = Workflow(workflow.steps[:length])
        total = sum(workflow_bounds(prefix, roster, question, answer_max_tokens=answer_max_tokens,
                                    previous_final=previous_final))
        if budget is None or total <= budget:
            return prefix, total
    return Workflow(()), 0.0
