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
from conductor.verifiers.answer_key import CODE_KINDS
from conductor.verifiers.gsm8k import to_decimal
from conductor.verifiers.multiple_choice import LETTERS

CHARS_PER_TOKEN = 4
DISTRACTOR_SHARE = 0.5  # of wrong multiple-choice answers, the share on the item's one attractive distractor
_KEY_IDEA = re.compile(r"Key idea: (idea-[0-9a-f]{12})")
_FILLER = ("Restating what is given and what is asked.", "Checking each intermediate result before moving on.",
           "Considering the edge cases the question allows.", "Comparing the result against a quick estimate.")
_LEADS = {"verify": "I checked the earlier answer step by step.",
          "aggregate": "Comparing the earlier answers and their reasoning."}
_SOLVE_LEADS = {"math": "Working through it step by step.", "number": "Working through it step by step.",
                "choice": "Weighing each option in turn."}


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
    """The answer a worker states when it works alone: gold, or its own plausible wrong one."""
    kind, gold = task.verifier, task.answer
    if correct:
        return task.meta["prompt"] + gold if kind == "humaneval" else gold
    approach = int(draw * 3) + 1
    if kind == "humaneval":  # the last line dropped: every such variant fails (tests/test_code_verifiers.py)
        lines = gold.rstrip().split("\n")
        return task.meta["prompt"] + "\n".join(lines[:-1]) + f"\n    # approach {approach}\n"
    if kind == "mbpp":  # a dropped last line passes 8 items' asserts (None for False); a misnamed function none
        name = re.escape(task.meta["entry_point"])
        return re.sub(rf"^(\s*)def\s+{name}\s*\(", rf"\g<1>def {task.meta['entry_point']}_v{approach}(", gold,
                      count=1, flags=re.MULTILINE)
    if kind == "choice":  # wrong answers share an item's attractive distractor, as real models' do
        others = [LETTERS[i] for i in range(task.meta["num_options"]) if LETTERS[i] != gold]
        distractor = _pick(others, uniform("distractor", task.id))
        if draw < DISTRACTOR_SHARE:
            return distractor
        return _pick(others, (draw - DISTRACTOR_SHARE) / (1 - DISTRACTOR_SHARE))
    return _pick(list(task.meta.get("wrong_answers") or _generic_wrong(task)), draw)


def render_answer(task: Task, value: str, worker: SimWorker, role: str, draw: float) -> str:
    kind = task.verifier
    lead = _LEADS.get(role) or _SOLVE_LEADS.get(kind, "")
    head = lead + _padding(worker.answer_tokens, draw)
    head = f"{head}\n" if head else ""
    if kind in CODE_KINDS:
        return f"{head}Here is the implementation.\n\n```python\n{value}```"
    if kind == "number":
        return f"{head}#### {value}"
    if kind == "math":
        return f"{head}\nThe final answer is $\\boxed{{{value}}}$."
    return f"{head}Answer: {value}"


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


def _pick(options: list[str], draw: float) -> str:
    return options[int(draw * len(options)) % len(options)]


def _generic_wrong(task: Task) -> list[str]:
    """Near misses that are never equivalent to the gold answer."""
    number = to_decimal(task.answer)
    if number is not None:
        return [str(number + 1), str(number - 1), str(number + 10)]
    return [f"{task.answer}+1", f"{task.answer}-1"]
