"""A task: one question with everything needed to score an answer to it.

``prompt`` already carries the answer-format instruction the verifier relies on. ``verifier`` names the
check (a name in conductor/verifiers/registry.py) and ``meta`` holds its inputs (tests, option permutation...).
``reward_function`` names the user's function (``module:function``) of a ``python`` verifier, by name so that
each process that scores imports it itself (conductor/verifiers/python_reward.py); ``reward_server`` is an
``http`` verifier's server and its settings (conductor/verifiers/http_reward.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from conductor.verifiers.registry import VerifierKind

if TYPE_CHECKING:
    from conductor.verifiers.http_reward import RewardServer

__all__ = ["Task", "VerifierKind"]


@dataclass(frozen=True)
class Task:
    id: str
    domain: str
    prompt: str
    answer: str
    verifier: VerifierKind
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    reward_function: Optional[str] = None
    reward_server: Optional[RewardServer] = None
