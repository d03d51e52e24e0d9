"""The outcome of checking one response against one task."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Verdict:
    correct: bool
    extracted: Optional[str] = None  # the answer the verifier read from the response, if any
    detail: str = ""
    # The verifier could not judge (a sandbox that refused for missing isolation, or failed to start):
    # the rollout is an infrastructure error, excluded from rewards and accuracy, never a wrong answer.
    infra_error: Optional[str] = None
    isolation: Optional[Mapping[str, bool]] = None  # code answers: the sandbox layers applied to the last run
    # A graded verdict in [0, 1] (a user's Python reward: conductor/verifiers/python_reward.py); None: the
    # built-ins' right or wrong, which score 1 and 0. The reward interpolates it (conductor/rewards.py).
    score: Optional[float] = None
