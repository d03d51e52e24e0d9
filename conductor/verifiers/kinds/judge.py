"""``judge``: an open-ended answer graded by a judge worker of the pool against a rubric
(conductor/verifiers/judge.py). The reference is optional: the rubric shows it where the field map names one.

Answers are stated and voted on as ``text`` answers. The simulated workers end with ``Answer: value``: the
reference when right; when wrong, one of the item's ``meta["wrong_answers"]``, or else one of the vague
answers below that a weak model gives an open question. The simulated judge reads that line back
(conductor/simulator/judge.py), so the simulator needs the reference, which is its truth."""

from __future__ import annotations

from typing import TYPE_CHECKING

from conductor.verifiers import judge
from conductor.verifiers.kinds import text
from conductor.verifiers.registry import SimulatedAnswer, VerifierSpec

if TYPE_CHECKING:
    from conductor.tasks.task import Task

VAGUE_ANSWERS = (
    "It depends on the circumstances; there is no general answer.",
    "More information is needed before anything useful can be said.",
    "Keep doing what is done now and wait to see what happens.",
    "Ask an expert; the question is outside common knowledge.",
)


def simulated_value(task: Task, correct: bool, draw: float) -> str:
    if correct:
        return task.answer
    options = list(task.meta.get("wrong_answers") or VAGUE_ANSWERS)
    return options[int(draw * len(options)) % len(options)]


SPECS = (VerifierSpec("judge", judge.check_unbound, text.final_value, text.answer_key, text.INSTRUCTION,
                      reference=False, by_judge=True, simulated=SimulatedAnswer(value=simulated_value)),)
