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
    failed_attempts_usd: float = 0.0  # billed for attempts that failed before this one answered (not in cost_usd)
    unsettled_attempts: int = 0  # attempts sent whose bill is unknown (a timeout, a dropped connection)


class WorkerCallError(Exception):
    """A worker call that failed for good. ``kind`` is a short machine-readable class of failure. A failed
    call can still have cost money: ``failed_attempts_usd`` its attempts were billed, and
    ``unsettled_attempts`` sent whose bill is unknown."""

    def __init__(self, worker_id: str, kind: str, message: str, retries: int = 0, *,
                 failed_attempts_usd: float = 0.0, unsettled_attempts: int = 0):
        super().__init__(f"worker {worker_id}: {kind}: {message} (after {retries} retries)")
        self.worker_id = worker_id
        self.kind = kind
        self.message = message
        self.retries = retries
        self.failed_attempts_usd = failed_attempts_usd
        self.unsettled_attempts = unsettled_attempts

    def payload(self) -> dict:
        """Plain data that ``WorkerCallError(**payload)`` raises again (across a Ray actor's boundary)."""
        return {"worker_id": self.worker_id, "kind": self.kind, "message": self.message, "retries": self.retries,
                "failed_attempts_usd": self.failed_attempts_usd, "unsettled_attempts": self.unsettled_attempts}


class ReplayMiss(Exception):
    """A call a replay-only response cache has no answer for (conductor/response_cache.py). Not a
    ``WorkerCallError``: it is not infrastructure trouble an episode can be unscored for, but a replay that
    cannot go on, so it stops the run, naming the request."""


class WorkerPoolClient(Protocol):
    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        """``on_delta``: stream the reply into it as it arrives (a pool that cannot stream may hand it the
        whole text at once); the result is the same either way. ``max_billable_attempts``: no retry once this
        many attempts have been, or may have been, billed (a cost cap's; a request the provider refused, a 429
        or a 503, is not billed and is retried as usual). The executor passes it only when it is set, so a
        pool without the keyword works wherever no cap asks for it."""
