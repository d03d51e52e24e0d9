"""``number``: GSM8K-style numeric answers (``#### N``), compared as exact decimals."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from conductor.verifiers.gsm8k import extract_number, to_decimal, verify_number
from conductor.verifiers.registry import SimulatedAnswer, VerifierSpec

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task
    from conductor.verifiers.verdict import Verdict

INSTRUCTION = "End the response with '#### N', where N is the final number."


def check(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_number(task.answer, response)


def final_value(task: Task, text: str) -> Optional[str]:
    return extract_number(text)


def answer_key(task: Task, value: str) -> str:
    number = to_decimal(value)
    return value.strip() if number is None else str(number)


def reference_problem(gold: str) -> Optional[str]:
    """A gold that is not one finite number (a worked solution, "1/2", "3 apples") scores every answer wrong."""
    number = to_decimal(gold)
    if number is None or not number.is_finite():
        return f"{gold[:80]!r} is not a number (verifier number compares exact decimals)"
    return None


def render(value: str) -> str:
    return f"#### {value}"


SPECS = (VerifierSpec("number", check, final_value, answer_key, INSTRUCTION,
                      simulated=SimulatedAnswer(render, lead="Working through it step by step."),
                      reference_problem=reference_problem),)
