"""Code answers, run against the task's tests in the sandbox (conductor/verifiers/code_tests.py, sandbox.py):
``humaneval`` (the prompt's stub + ``check``), ``mbpp`` (assert lines), and LiveCodeBench's ``lcb_stdin``
and ``lcb_functional``. None reads a reference answer; the gold code, where a dataset has one, is what the
simulator states and what the cheap ``is_right`` looks for."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

from conductor.verifiers.code_tests import (
    extract_code,
    verify_assert_tests,
    verify_functional_tests,
    verify_humaneval,
    verify_stdin_tests,
)
from conductor.verifiers.kinds import text
from conductor.verifiers.registry import SimulatedAnswer, VerifierSpec
from conductor.verifiers.sandbox import SandboxLimits
from conductor.verifiers.verdict_memo import VerdictMemo, key_of

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task
    from conductor.verifiers.verdict import Verdict

INSTRUCTION = "Return the complete solution in a single ```python code block."


def limits(settings: VerifierConfig) -> SandboxLimits:
    return SandboxLimits(wall_s=settings.code_timeout_s, cpu_s=settings.code_timeout_s,
                         memory_mb=settings.code_memory_mb, require_isolation=settings.require_code_isolation,
                         require_confined_reads=not settings.allow_unconfined_code_reads)


MEMO = VerdictMemo()


def remembered(check: Callable[[Task, str, VerifierConfig], Verdict], fields: tuple[str, ...]
               ) -> Callable[[Task, str, VerifierConfig], Verdict]:
    """``check``, run once per code, task ``fields`` (the tests it reads) and limits (verdict_memo.py)."""
    def run(task: Task, response: str, settings: VerifierConfig) -> Verdict:
        key = key_of(check.__name__, extract_code(response), {name: task.meta.get(name) for name in fields},
                     limits(settings))
        return MEMO.get_or_run(key, lambda: check(task, response, settings))
    return run


def check_humaneval(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    meta = task.meta
    return verify_humaneval(response, meta["prompt"], meta["test"], meta["entry_point"], limits(settings))


def check_mbpp(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_assert_tests(response, task.meta["tests"], task.meta["test_imports"], limits(settings),
                               task.meta.get("entry_point"))


def check_lcb_stdin(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    return verify_stdin_tests(response, task.meta["tests"], limits(settings))


def check_lcb_functional(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    meta = task.meta
    return verify_functional_tests(response, meta["tests"], meta["func_name"], meta["starter_code"], limits(settings))


def final_code(task: Task, text: str) -> Optional[str]:
    """The python block a reply states; prose (a plan) states no code."""
    code = extract_code(text) if "```" in text else ""
    return code if code.strip() else None


def code_key(task: Task, value: str) -> str:
    return " ".join(value.split())


def holds_gold(task: Task, value: str) -> bool:
    return task.answer.strip() != "" and task.answer.rstrip() in value


def render_code(value: str) -> str:
    return f"Here is the implementation.\n\n```python\n{value}```"


def humaneval_value(task: Task, correct: bool, draw: float) -> str:
    """The stub and the gold body; wrong: the last line dropped, which every such variant fails
    (tests/test_code_verifiers.py)."""
    if correct:
        return task.meta["prompt"] + task.answer
    lines = task.answer.rstrip().split("\n")
    return task.meta["prompt"] + "\n".join(lines[:-1]) + f"\n    # approach {int(draw * 3) + 1}\n"


def mbpp_value(task: Task, correct: bool, draw: float) -> str:
    """The gold module; wrong: its function misnamed, which passes no item's asserts (a dropped last line
    passes 8 items' asserts: None for False)."""
    if correct:
        return task.answer
    name = task.meta["entry_point"]
    return re.sub(rf"^(\s*)def\s+{re.escape(name)}\s*\(", rf"\g<1>def {name}_v{int(draw * 3) + 1}(", task.answer,
                  count=1, flags=re.MULTILINE)


def _block(name: str, check: Callable[[Task, str, VerifierConfig], Verdict], meta: tuple[str, ...],
           simulated_value: Callable[[Task, bool, float], str]) -> VerifierSpec:
    """A kind with gold code: stated as a python block, keyed by its code."""
    return VerifierSpec(name, check, final_code, code_key, INSTRUCTION, reference=False, meta=meta,
                        is_right=holds_gold, simulated=SimulatedAnswer(render_code, value=simulated_value))


def _no_gold(name: str, check: Callable[[Task, str, VerifierConfig], Verdict], meta: tuple[str, ...]) -> VerifierSpec:
    """LiveCodeBench has no gold code: votes and the simulator read and key its answers as text answers."""
    return VerifierSpec(name, check, text.final_value, text.answer_key, INSTRUCTION, reference=False, meta=meta)


HUMANEVAL, MBPP = ("prompt", "test", "entry_point"), ("tests", "test_imports")  # the meta each kind needs
LCB_STDIN, LCB_FUNCTIONAL = ("tests",), ("tests", "func_name", "starter_code")
SPECS = (
    _block("humaneval", remembered(check_humaneval, HUMANEVAL), HUMANEVAL, humaneval_value),
    _block("mbpp", remembered(check_mbpp, (*MBPP, "entry_point")), MBPP, mbpp_value),  # entry_point if known
    _no_gold("lcb_stdin", remembered(check_lcb_stdin, LCB_STDIN), LCB_STDIN),
    _no_gold("lcb_functional", remembered(check_lcb_functional, LCB_FUNCTIONAL), LCB_FUNCTIONAL),
)
