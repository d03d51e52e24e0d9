"""``math``: the response's last ``\\boxed{}`` against the gold answer, by math-verify in a deadline child."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from conductor.verifiers.math_answer import extract_boxed, normalise_latex, verify_math
from conductor.verifiers.registry import SimulatedAnswer, VerifierSpec

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task
    from conductor.verifiers.verdict import Verdict

INSTRUCTION = "Put the final answer in \\boxed{}."


def check(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_math(task.answer, response, settings.math_timeout_s)


def final_value(task: Task, text: str) -> Optional[str]:
    return extract_boxed(text)


def answer_key(task: Task, value: str) -> str:
    return normalise_latex(value)


def render(value: str) -> str:
    return f"\nThe final answer is $\\boxed{{{value}}}$."


SPECS = (VerifierSpec("math", check, final_value, answer_key, INSTRUCTION,
                      simulated=SimulatedAnswer(render, lead="Working through it step by step.")),)
