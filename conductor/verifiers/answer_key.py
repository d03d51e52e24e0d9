"""An answer's stated final value, and a normal form under which two answers count as the same.

Used wherever answers are compared without running the full verifier: majority votes (consensus), the
simulator reading earlier turns. ``is_right`` is a cheap gold check with no sandbox; scoring always goes
through conductor.verifiers.verify.
"""

from __future__ import annotations

from typing import Optional

from conductor.tasks.task import Task
from conductor.verifiers.code_tests import extract_code
from conductor.verifiers.gsm8k import extract_number, to_decimal
from conductor.verifiers.math_answer import extract_boxed, normalise_latex
from conductor.verifiers.multiple_choice import extract_letter
from conductor.verifiers.text_match import extract_answer, normalise

CODE_KINDS = ("humaneval", "mbpp")  # the answer is a python block; the gold is its canonical code


def final_value(task: Task, text: str) -> Optional[str]:
    """The final answer ``text`` states, as written (None: it states none, e.g. a plan)."""
    kind = task.verifier
    if kind == "math":
        return extract_boxed(text)
    if kind == "number":
        return extract_number(text)
    if kind == "choice":
        return extract_letter(text, task.meta["num_options"])
    if kind in CODE_KINDS:
        code = extract_code(text) if "```" in text else ""  # prose (a plan) states no code
        return code if code.strip() else None
    return extract_answer(text)


def answer_key(task: Task, value: str) -> str:
    """A normal form under which two stated answers count as the same answer."""
    kind = task.verifier
    if kind == "math":
        return normalise_latex(value)
    if kind == "number":
        number = to_decimal(value)
        return value.strip() if number is None else str(number)
    if kind in CODE_KINDS:
        return " ".join(value.split())
    if kind == "choice":
        return value
    return normalise(value)


def is_right(task: Task, value: str) -> bool:
    """Does a stated answer match the gold one (a cheap check, no sandbox)?"""
    kind = task.verifier
    if kind in CODE_KINDS:
        return task.answer.strip() != "" and task.answer.rstrip() in value
    if kind == "choice":
        return value == task.answer
    return answer_key(task, value) == answer_key(task, task.answer)
