"""A task: one question with everything needed to score an answer to it.

``prompt`` already carries the answer-format instruction the verifier relies on. ``verifier`` names the
check (see conductor.verifiers.verify) and ``meta`` holds its inputs (tests, option permutation...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

VerifierKind = Literal["math", "choice", "number", "text", "exact", "humaneval", "mbpp", "lcb_stdin", "lcb_functional"]
# What each verifier reads besides the response: the reference answer, and these meta keys.
REFERENCE_VERIFIERS = frozenset({"math", "choice", "number", "text", "exact"})
VERIFIER_META: dict[str, tuple[str, ...]] = {
    "choice": ("num_options",), "humaneval": ("prompt", "test", "entry_point"), "mbpp": ("tests", "test_imports"),
    "lcb_stdin": ("tests",), "lcb_functional": ("tests", "func_name", "starter_code")}


@dataclass(frozen=True)
class Task:
    id: str
    domain: str
    prompt: str
    answer: str
    verifier: VerifierKind
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
