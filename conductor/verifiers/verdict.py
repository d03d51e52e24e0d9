"""The outcome of checking one response against one task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Verdict:
    correct: bool
    extracted: Optional[str] = None  # the answer the verifier read from the response, if any
    detail: str = ""
