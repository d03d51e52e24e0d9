"""One entry point for scoring a response against a task: the task's verifier kind, looked up in the
registry (conductor/verifiers/registry.py)."""

from __future__ import annotations

from typing import Optional

from conductor.config import VerifierConfig
from conductor.tasks.task import Task
from conductor.verifiers import registry
from conductor.verifiers.verdict import Verdict


def verify(task: Task, response: str, settings: Optional[VerifierConfig] = None) -> Verdict:
    """Never raises for anything in ``response``; a None/empty response is simply wrong."""
    settings = settings or VerifierConfig()
    if not response:
        return Verdict(False, None, "no response")
    try:
        spec = registry.get(task.verifier)
    except registry.UnknownVerifier as exc:
        raise ValueError(f"task {task.id}: unknown verifier kind {task.verifier!r} ({exc})") from None
    return spec.check(task, response, settings)
