"""One entry point for scoring a response against a task, by the task's verifier kind."""

from __future__ import annotations

from typing import Optional

from conductor.config import VerifierConfig
from conductor.tasks.task import Task
from conductor.verifiers.code_tests import (
    verify_assert_tests,
    verify_functional_tests,
    verify_humaneval,
    verify_stdin_tests,
)
from conductor.verifiers.gsm8k import verify_number
from conductor.verifiers.math_answer import verify_math
from conductor.verifiers.multiple_choice import verify_choice
from conductor.verifiers.sandbox import SandboxLimits
from conductor.verifiers.text_match import verify_text
from conductor.verifiers.verdict import Verdict


def verify(task: Task, response: str, settings: Optional[VerifierConfig] = None) -> Verdict:
    """Never raises for anything in ``response``; a None/empty response is simply wrong."""
    settings = settings or VerifierConfig()
    if not response:
        return Verdict(False, None, "no response")
    limits = SandboxLimits(wall_s=settings.code_timeout_s, cpu_s=settings.code_timeout_s,
                           memory_mb=settings.code_memory_mb, require_isolation=settings.require_code_isolation)
    kind, meta = task.verifier, task.meta
    if kind == "math":
        return verify_math(task.answer, response, settings.math_timeout_s)
    if kind == "number":
        return verify_number(task.answer, response)
    if kind == "choice":
        return verify_choice(task.answer, response, meta["num_options"])
    if kind in ("text", "exact"):
        return verify_text(task.answer, response, exact=kind == "exact")
    if kind == "humaneval":
        return verify_humaneval(response, meta["prompt"], meta["test"], meta["entry_point"], limits)
    if kind == "mbpp":
        return verify_assert_tests(response, meta["tests"], meta["test_imports"], limits)
    if kind == "lcb_stdin":
        return verify_stdin_tests(response, meta["tests"], limits)
    if kind == "lcb_functional":
        return verify_functional_tests(response, meta["tests"], meta["func_name"], meta["starter_code"], limits)
    raise ValueError(f"task {task.id}: unknown verifier kind {kind!r}")
