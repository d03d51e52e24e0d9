"""Which tokens of a sampled workflow choose its workers (those that write the digits of ``model_id``), and
which write its plan line (every token before the first ``model_id``, and the one that starts it).

Why the learner needs them. GRPO pushes every question's group toward whatever its better samples wrote.
Before the worker a policy names depends on the question, those pushes add up to one shared preference,
and the worker that is good on average wins everywhere: on paper-7 from uniform worker ids, gemini took
every domain by step ~80 and the groups stopped exploring before code could pull gpt-5 back
(docs/experiments.md, "paper-7 from a uniform warm start with a plan line"). A KL term to the warm start
holds that choice open, but on every token it also holds the subtasks and the format where they were.
``learner.worker_id_kl_coef`` puts the term on these tokens only; ``learner.worker_id_kl_scope: first`` on the
first worker's alone, because a check's worth depends on who checks, and a checker held near the warm start's
uniform draw made every check look like a wash on paper-7 (docs/experiments.md, "#paper7-rl-checks").
``learner.later_worker_kl_coef`` sets the all-token KL term's coefficient on the later workers' tokens
(``later_worker_positions``): the shapes and the format stay held while whom to ask to check moves.

The positions are found in the text, as the workflow parser reads it: the digits inside the *last*
``model_id = [...]`` of the completion (conductor/workflow.py reads each list from its last assignment).
A token counts when any of its characters is such a digit. ``token_texts`` are the completion's tokens
decoded one by one; for the ASCII list this text is, their concatenation is the decoded completion.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_MODEL_ID_LIST = re.compile(r"model_id\s*=\s*\[([^\[\]]*)\]")


def worker_choice_positions(token_texts: Sequence[str], first_only: bool = False) -> tuple[int, ...]:
    """Indices of the tokens that write a digit of the last ``model_id`` list; () when there is none.
    ``first_only``: of its first entry alone, the worker that answers first (``learner.worker_id_kl_scope:
    first``), so the workers that check or build on it are free to move."""
    text = "".join(token_texts)
    matches = list(_MODEL_ID_LIST.finditer(text))
    if not matches:
        return ()
    start, end = matches[-1].span(1)
    if first_only:
        comma = text.find(",", start, end)
        end = comma if comma >= 0 else end
    digits = {offset for offset in range(start, end) if text[offset].isdigit()}
    positions, offset = [], 0
    for index, piece in enumerate(token_texts):
        if any(character in digits for character in range(offset, offset + len(piece))):
            positions.append(index)
        offset += len(piece)
    return tuple(positions)


def later_worker_positions(token_texts: Sequence[str]) -> tuple[int, ...]:
    """The tokens that name the workers after the first (who check or build on its answer): the digits of the
    last ``model_id`` list past its first entry. A token that also writes a digit of the first entry is the
    first worker's."""
    first = set(worker_choice_positions(token_texts, first_only=True))
    return tuple(index for index in worker_choice_positions(token_texts) if index not in first)


def plan_line_positions(token_texts: Sequence[str]) -> tuple[int, ...]:
    """Indices of the tokens that write the completion's plan line (``sft.plan``) and of the token that starts
    its first ``model_id``, which decides where a plan line ends, or that there is none. ``learner.
    train_plan_line: false`` keeps them out of the loss. Why: a plan line that names the question's kind is a
    reading, not a choice; trained by the reward, GRPO rewrote math and MMLU questions' kind as "code" to borrow
    code's worker (docs/experiments.md, run rl5), and with the line's own tokens alone left out, it learned to
    skip the line (run rl6). () when the completion has no ``model_id``."""
    text = "".join(token_texts)
    start = text.find("model_id")
    if start < 0:
        return ()
    positions, offset = [], 0
    for index, piece in enumerate(token_texts):
        positions.append(index)
        offset += len(piece)
        if offset > start:
            break
    return tuple(positions)


class TokenTexts:
    """Each token id's text, decoded once per id (a learner step decodes the same few hundred ids)."""

    def __init__(self, tokenizer):
        self._tokenizer = tokenizer
        self._texts: dict[int, str] = {}

    def __call__(self, token_ids: Sequence[int]) -> list[str]:
        texts = self._texts
        for token in token_ids:
            if token not in texts:
                texts[token] = self._tokenizer.decode([token])
        return [texts[token] for token in token_ids]

    def choice_positions(self, token_ids: Sequence[int], first_only: bool = False) -> tuple[int, ...]:
        return worker_choice_positions(self(token_ids), first_only)

    def later_positions(self, token_ids: Sequence[int]) -> tuple[int, ...]:
        return later_worker_positions(self(token_ids))

    def plan_positions(self, token_ids: Sequence[int]) -> tuple[int, ...]:
        return plan_line_positions(self(token_ids))
