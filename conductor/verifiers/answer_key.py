"""An answer's stated final value, and a normal form under which two answers count as the same.

Used wherever answers are compared without running the full verifier: majority votes (consensus), the
simulator reading earlier turns. ``is_right`` is a cheap gold check with no sandbox; scoring always goes
through conductor.verifiers.verify. Each kind's rules are its registry entry's (conductor/verifiers/kinds/).
"""

from __future__ import annotations

from typing import Optional

from conductor.tasks.task import Task
from conductor.verifiers import registry


def final_value(task: Task, text: str) -> Optional[str]:
    """The final answer ``text`` states, as written (None: it states none, e.g. a plan)."""
    return registry.get(task.verifier).final_value(task, text)


def answer_key(task: Task, value: str) -> str:
    """A normal form under which two stated answers count as the same answer."""
    return registry.get(task.verifier).answer_key(task, value)


def is_right(task: Task, value: str) -> bool:
    """Does a stated answer match the gold one (a cheap check, no sandbox)?"""
    spec = registry.get(task.verifier)
    if spec.is_right is not None:
        return spec.is_right(task, value)
    return spec.answer_key(task, value) == spec.answer_key(task, task.answer)
