"""What a simulated reply looks like, and how the simulator reads earlier replies back.

Answers are rendered in the format the question asks for (\\boxed{}, ``#### N``, ``Answer: X``, a python
block); wrong answers are plausible (a near number, another option, broken code) and differ between
workers, so that answers can disagree. A worker's visible reply is padded to its preset length (real
answers are paragraphs, and later steps pay to read them); its hidden reasoning is billed, not shown.

A plan states no final answer, only a key idea: the right one if the planner could solve the item, and
otherwise a wrong one. The key ideas are hashes, so the simulator can tell a right plan from a wrong one
when a later step shows it, and nothing but the simulator can.
"""

from __future__ import annotations

import hashlib
import re
from typing import Optional

from conductor.simulator.presets import SimWorker
from conductor.tasks.task import Task
from conductor.verifiers import registry
from conductor.verifiers.gsm8k import to_decimal

CHARS_PER_TOKEN = 4
_KEY_IDEA = re.compile(r"Key idea: (idea-[0-9a-f]{12})")
_FILLER = ("Restating what is given and what is asked.", "Checking each intermediate result before moving on.",
           "Considering the edge cases the question allows.", "Comparing the result against a quick estimate.")
_LEADS = {"verify": "I checked the earlier answer step by step.",
          "aggregate": "Comparing the earlier answers and their reasoning."}


def uniform(*parts: object) -> float:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2 ** 64


def key_idea(seed: int, task: Task, right: bool, worker: str) -> str:
    parts = (seed, "idea", task.id) if right else (seed, "idea", task.id, worker)
    return "idea-" + hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=6).hexdigest()


def plan_is_right(seed: int, task: Task, text: str) -> Optional[bool]:
    """True/False for a plan with the right/a wrong key idea; None if ``text`` is not a plan."""
    match = _KEY_IDEA.search(text)
    return None if match is None else match.group(1) == key_idea(seed, task, True, "")


def own_value(task: Task, correct: bool, draw: float) -> str:
    """The answer a worker states when it works alone: gold, or its own plausible wrong one (the kind's own
    rule where its registry entry has one: a near option, broken code)."""
    value = registry.get(task.verifier).simulated.value
    if value is not None:
        return value(task, correct, draw)
    if correct:
        return task.answer
    return pick(list(task.meta.get("wrong_answers") or _generic_wrong(task)), draw)


def render_answer(task: Task, value: str, worker: SimWorker, role: str, draw: float) -> str:
    """Working padded to the worker's length, then the value worded as the kind's registry entry says."""
    simulated = registry.get(task.verifier).simulated
    lead = _LEADS.get(role) or simulated.lead
    head = lead + _padding(worker.answer_tokens, draw)
    head = f"{head}\n" if head else ""
    return head + simulated.render(value)


def render_plan(task: Task, idea: str, worker: SimWorker, draw: float) -> str:
    body = _padding(worker.answer_tokens, draw)
    return (f"Plan (no final answer yet).{body}\n1. Identify what the question asks.\n"
            f"2. Key idea: {idea}\n3. Carry it through and check the result.")


def _padding(tokens: int, draw: float) -> str:
    """About ``tokens`` tokens of neutral working, varying +-25% by item and worker."""
    target = int(tokens * (0.75 + 0.5 * draw)) * CHARS_PER_TOKEN
    lines, size, k = [], 0, 0
    while size < target:
        line = f"\nStep {k + 1}: {_FILLER[k % len(_FILLER)]}"
        lines.append(line)
        size, k = size + len(line), k + 1
    return "".join(lines)


def pick(options: list[str], draw: float) -> str:
    return options[int(draw * len(options)) % len(options)]


def _generic_wrong(task: Task) -> list[str]:
    """Near misses that are never equivalent to the gold answer."""
    number = to_decimal(task.answer)
    if number is not None:
        return [str(number + 1), str(number - 1), str(number + 10)]
    return [f"{task.answer}+1", f"{task.answer}-1"]
