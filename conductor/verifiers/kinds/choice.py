"""``choice``: multiple choice; the gold is an option letter within ``meta["num_options"]``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from conductor.verifiers.multiple_choice import LETTERS, extract_letter, verify_choice
from conductor.verifiers.registry import SimulatedAnswer, VerifierSpec

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task
    from conductor.verifiers.verdict import Verdict

INSTRUCTION = "End the response with 'Answer: X', where X is the letter of the correct option."
DISTRACTOR_SHARE = 0.5  # of wrong simulated answers, the share on the item's one attractive distractor


def check(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_choice(task.answer, response, task.meta["num_options"])


def final_value(task: Task, text: str) -> Optional[str]:
    return extract_letter(text, task.meta["num_options"])


def answer_key(task: Task, value: str) -> str:
    return value


def is_right(task: Task, value: str) -> bool:
    return value == task.answer


def simulated_value(task: Task, correct: bool, draw: float) -> str:
    """Wrong answers share an item's attractive distractor, as real models' do."""
    from conductor.simulator.render import pick, uniform  # the simulator's hashes; only it asks for this

    if correct:
        return task.answer
    others = [LETTERS[i] for i in range(task.meta["num_options"]) if LETTERS[i] != task.answer]
    distractor = pick(others, uniform("distractor", task.id))
    if draw < DISTRACTOR_SHARE:
        return distractor
    return pick(others, (draw - DISTRACTOR_SHARE) / (1 - DISTRACTOR_SHARE))


SPECS = (VerifierSpec("choice", check, final_value, answer_key, INSTRUCTION, meta=("num_options",),
                      is_right=is_right,
                      simulated=SimulatedAnswer(lead="Weighing each option in turn.", value=simulated_value)),)
