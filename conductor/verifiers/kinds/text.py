"""``text`` (normalised: case, Unicode form, punctuation, articles, whitespace) and ``exact`` string answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from conductor.verifiers.registry import VerifierSpec
from conductor.verifiers.text_match import extract_answer, normalise, verify_text

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task
    from conductor.verifiers.verdict import Verdict

INSTRUCTION = "End the response with 'Answer: ' followed by the answer."


def check_text(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_text(task.answer, response)


def check_exact(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_text(task.answer, response, exact=True)


def final_value(task: Task, text: str) -> Optional[str]:
    return extract_answer(text)


def answer_key(task: Task, value: str) -> str:
    """Exact answers too are keyed in the normal form: votes and the simulator group them as text."""
    return normalise(value)


SPECS = (VerifierSpec("text", check_text, final_value, answer_key, INSTRUCTION),
         VerifierSpec("exact", check_exact, final_value, answer_key, INSTRUCTION))
