"""What a simulated worker answers.

Base skill, calibrated and correlated: within a domain every item gets a difficulty ``z_i ~ N(0, 1)``
and each worker a private noise ``e_wi ~ N(0, 1)``; worker w gets right exactly the
``round(acc_w,d * n_d)`` items with the lowest ``z_i + e_wi``. So each worker's accuracy on the known
set equals its table value, and workers tend to fail on the same (hard) items.

Step interactions, on top: if an earlier turn in the worker's context holds a right answer, a wrong
base answer turns right with probability ``boost``; if it holds only wrong answers, a right base answer
turns wrong with probability ``mislead``. Draws are hashes of (seed, worker, item, context), so a
request always gets the same answer: seeded and reproducible.

Answers are rendered in the format the question asks for (\\boxed{}, ``#### N``, ``Answer: X``, a
python block); wrong answers are plausible (a near number, another option, broken code).
"""

from __future__ import annotations

import hashlib
import re
import statistics
from typing import Optional

from conductor.pool import Messages
from conductor.simulator.presets import SimPreset, SimWorker
from conductor.tasks.task import Task
from conductor.verifiers.code_tests import extract_code
from conductor.verifiers.gsm8k import extract_number, to_decimal
from conductor.verifiers.math_answer import extract_boxed, normalise_latex
from conductor.verifiers.multiple_choice import LETTERS, extract_letter
from conductor.verifiers.text_match import extract_answer, normalise

KEY_CHARS = 48  # tasks are indexed by their first characters, then matched on the whole prompt
_QUESTION_MARKER = re.compile(r"Question:\s*\n")
_NORMAL = statistics.NormalDist()


def uniform(*parts: object) -> float:
    digest = hashlib.blake2b("|".join(map(str, parts)).encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2 ** 64


def normalise_space(text: str) -> str:
    return " ".join(text.split())


class Oracle:
    def __init__(self, preset: SimPreset, seed: int = 0, boost: float = 0.5, mislead: float = 0.3):
        self.workers = {w.name: w for w in preset.workers}
        self.seed, self.boost, self.mislead = seed, boost, mislead
        self.tasks_by_key: dict[str, list[tuple[str, Task]]] = {}
        for task in preset.tasks:
            prompt = normalise_space(task.prompt)
            self.tasks_by_key.setdefault(prompt[:KEY_CHARS], []).append((prompt, task))
        self.base_correct: dict[tuple[str, str], bool] = {}
        for domain in sorted({t.domain for t in preset.tasks}):
            items = [t for t in preset.tasks if t.domain == domain]
            difficulty = {t.id: _NORMAL.inv_cdf(uniform(seed, "difficulty", t.id)) for t in items}
            for worker in preset.workers:
                accuracy = worker.accuracy.get(domain, 0.0)
                ranked = sorted(items, key=lambda t: difficulty[t.id]
                                + _NORMAL.inv_cdf(uniform(seed, "noise", worker.name, t.id)))
                cutoff = round(accuracy * len(items))
                for rank, task in enumerate(ranked):
                    self.base_correct[(worker.name, task.id)] = rank < cutoff

    def _lookup(self, text: str) -> Optional[Task]:
        text = normalise_space(text)
        for prompt, task in self.tasks_by_key.get(text[:KEY_CHARS], ()):
            if text.startswith(prompt):
                return task
        return None

    def find_task(self, messages: Messages) -> Optional[Task]:
        """The known task whose prompt follows a 'Question:' line, or opens a user message."""
        for message in messages:
            if message.get("role") != "user":
                continue
            content = message.get("content") or ""
            starts = [match.end() for match in _QUESTION_MARKER.finditer(content)] + [0]
            for start in starts:
                task = self._lookup(content[start:])
                if task is not None:
                    return task
        return None

    def is_right(self, task: Task, text: str) -> bool:
        """A cheap check of an earlier turn (no sandbox): does it state the gold answer?"""
        kind = task.verifier
        if kind == "math":
            boxed = extract_boxed(text)
            return boxed is not None and normalise_latex(boxed) == normalise_latex(task.answer)
        if kind == "number":
            number = extract_number(text)
            return number is not None and to_decimal(number) == to_decimal(task.answer)
        if kind == "choice":
            return extract_letter(text, task.meta["num_options"]) == task.answer
        if kind == "humaneval":
            return task.answer.strip() != "" and task.answer.rstrip() in extract_code(text)
        answer = extract_answer(text)
        return answer is not None and normalise(answer) == normalise(task.answer)

    def context_state(self, task: Task, messages: Messages) -> Optional[bool]:
        """True if an earlier turn is right, False if earlier turns are all wrong, None if there are none."""
        earlier = [m.get("content") or "" for m in messages if m.get("role") == "assistant"]
        if not earlier:
            return None
        return any(self.is_right(task, text) for text in earlier)

    def decide(self, worker: SimWorker, task: Task, messages: Messages) -> bool:
        correct = self.base_correct.get((worker.name, task.id), False)
        context = self.context_state(task, messages)
        draw = uniform(self.seed, "context", worker.name, task.id, hashlib.blake2b(
            repr(messages).encode(), digest_size=8).hexdigest())
        if context is True and not correct:
            correct = draw < self.boost
        elif context is False and correct:
            correct = draw >= self.mislead
        return correct

    def answer(self, worker_name: str, messages: Messages) -> tuple[str, Optional[bool], Optional[str]]:
        """(response text, whether it is right or None for an unknown question, task id)."""
        worker = self.workers[worker_name]
        task = self.find_task(messages)
        if task is None:
            return "I could not identify enough information to answer this.", None, None
        correct = self.decide(worker, task, messages)
        return render(task, correct, uniform(self.seed, "wrong", worker.name, task.id)), correct, task.id


def _pick(options: list[str], draw: float) -> str:
    return options[int(draw * len(options)) % len(options)]


def render(task: Task, correct: bool, draw: float) -> str:
    kind, gold = task.verifier, task.answer
    if kind == "humaneval":
        body = gold if correct else "\n".join(gold.rstrip().split("\n")[:-1]) + "\n"
        return f"Here is the implementation.\n\n```python\n{task.meta['prompt']}{body}```"
    if kind == "choice":
        others = [LETTERS[i] for i in range(task.meta["num_options"]) if LETTERS[i] != gold]
        return f"Weighing each option in turn.\nAnswer: {gold if correct else _pick(others, draw)}"
    wrong = task.meta.get("wrong_answers") or _generic_wrong(task)
    value = gold if correct else _pick(list(wrong), draw)
    if kind == "number":
        return f"Working through it step by step.\n#### {value}"
    if kind == "math":
        return f"Working through it step by step.\n\nThe final answer is $\\boxed{{{value}}}$."
    return f"Answer: {value}"


def _generic_wrong(task: Task) -> list[str]:
    """Near misses that are never equivalent to the gold answer."""
    number = to_decimal(task.answer)
    if number is not None:
        return [str(number + 1), str(number - 1), str(number + 10)]
    return [f"{task.answer}+1", f"{task.answer}-1"]
