"""The pool interface the executor calls: ``await pool.chat(worker_id, messages, params)``.

Implementations: ``ScriptedPool`` (canned behaviour, for demos and tests), and the rate-limited
OpenAI-compatible client and its Ray actor (worker-pool layer). A call that fails after the pool's own
retries raises ``WorkerCallError``: infrastructure trouble, never a wrong answer. A replay-only response
cache raises ``ReplayMiss`` for a call it cannot answer: the run stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Protocol

Messages = list[dict[str, str]]
DeltaSink = Callable[[str], None]  # receives a streamed reply's text, piece by piece


@dataclass(frozen=True)
class ChatResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float = 0.0
    retries: int = 0
    latency_s: float = 0.0
    finish_reason: str = "stop"  # the provider's: "length" when its max_tokens cut the reply
    reasoning_tokens: int = 0  # hidden reasoning, billed within completion_tokens and never shown
    cached: bool = False  # served by the response cache: nothing spent; cost_usd is what the call cost when made


class WorkerCallError(Exception):
    """A worker call that failed for good. ``kind`` is a short machine-readable class of failure."""

    def __init__(self, worker_id: str, kind: str, message: str, retries: int = 0):
        super().__init__(f"worker {worker_id}: {kind}: {message} (after {retries} retries)")
        self.worker_id = worker_id
        self.kind = kind
        self.message = message
        self.retries = retries


class ReplayMiss(Exception):
    """A call a replay-only response cache has no answer for (conductor/response_cache.py). Not a
    ``WorkerCallError``: it is not infrastructure trouble an episode can be unscored for, but a replay that
    cannot go on, so it stops the run, naming the request."""


class WorkerPoolClient(Protocol):
    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None) -> ChatResult:
        """``on_delta``: stream the reply into it as it arrives (a pool that cannot stream may hand it the
        whole text at once); the result is the same either way."""
