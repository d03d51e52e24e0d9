"""The endpoint's per-key rate limit, shared by every Ray Serve ingress replica.

Each replica used to keep its own buckets, so a key could make ``requests_per_minute`` times the number of
replicas, and autoscaling raised a caller's limit with the load. Now one named, detached ``KeyLimitActor``
holds the buckets (conductor/serving/api_keys.py ``KeyLimiter``); a replica asks it for a token per request
(``SharedKeyLimiter.admit``) and answers the same 429 an empty bucket answers standalone.

- **One call in flight per replica.** Requests that arrive while a replica's call is out wait for the next
  one, which carries all of them (up to ``MAX_BATCH``): under load the actor sees a call per replica per
  round trip, not one per request, and a slow actor cannot build a backlog.
- **Named by the deployment and its limits:** ``conductor-key-limit-<scope>-<digest>``. Replicas of one
  deployment share it; another app (its ``run_name``), or a redeployment with other limits, gets its own.
  Detached: it outlives the replica that made it (replicas come and go with load), and a restarted actor
  starts its buckets full (it cannot know what its predecessor handed out).
- **When it cannot answer** within ``ASK_TIMEOUT_S`` (restarting, its node gone, frozen), the replica counts
  requests against buckets of its own for ``backoff_s``, then asks again; an actor that died (or never came
  up) is made or found again by name in the background, its process awaited off the event loop. It logs
  the outage once. The limit then holds per replica, as before this actor, rather than not at all, and no
  request waits on an actor known to be away.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from typing import Optional

import ray

from conductor.serve_config import ServeLimits
from conductor.serving.api_keys import KeyLimiter, rate_limited

log = logging.getLogger(__name__)
ACTOR_PREFIX = "conductor-key-limit"
ASK_TIMEOUT_S = 1.0
READY_TIMEOUT_S = 60.0  # a replica's start waits this long for the actor's process (made, or found)
BACKOFF_S = 10.0
MAX_BATCH = 1024


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class KeyLimitActor:
    def __init__(self, limits: ServeLimits):
        self.limiter = KeyLimiter(limits)

    def take(self, key_ids: list[str]) -> list[float]:
        """Per key id (one per request, in order): 0.0 when a token was taken, else the seconds until one."""
        return [self.limiter.take(key_id) for key_id in key_ids]


def actor_name(limits: ServeLimits, scope: str) -> str:
    digest = hashlib.sha256(f"{scope}/{limits.requests_per_minute!r}/{limits.burst}".encode()).hexdigest()[:12]
    return f"{ACTOR_PREFIX}-{digest}"


class SharedKeyLimiter:
    """A replica's side of the shared buckets (``RequestLimiter``). ``scope``: the deployment (its run name)."""

    def __init__(self, limits: ServeLimits, scope: str, backoff_s: float = BACKOFF_S):
        self.limits, self.name, self.backoff_s = limits, actor_name(limits, scope), backoff_s
        self.own = KeyLimiter(limits)  # this replica's buckets, used only while the actor cannot answer
        self.pending: list[tuple[str, asyncio.Future]] = []
        self.sender: Optional[asyncio.Task] = None
        self.reconnecting: Optional[asyncio.Task] = None
        self.own_until = 0.0  # monotonic time until which requests skip the actor
        self.unavailable = False
        self.actor = None
        if self.own.rate is not None:
            try:
                self.actor = self._connect()
            except Exception as exc:
                self._fall_back(exc)

    async def admit(self, key_id: str) -> None:
        if self.own.rate is None:
            return
        if self.actor is None or time.monotonic() < self.own_until:
            if self.actor is None and (self.reconnecting is None or self.reconnecting.done()):
                self.reconnecting = asyncio.create_task(self._reconnect())
            wait = self.own.take(key_id)
        else:
            answer: asyncio.Future = asyncio.get_running_loop().create_future()
            self.pending.append((key_id, answer))
            if self.sender is None or self.sender.done():
                self.sender = asyncio.create_task(self._send_pending())
            wait = await answer
        if wait > 0:
            raise rate_limited(self.own.rate, wait)

    def _connect(self):
        """The actor, made or found, once its process answers (a new one takes a while to start)."""
        actor = KeyLimitActor.options(name=self.name, get_if_exists=True, lifetime="detached").remote(self.limits)
        ray.get(actor.__ray_ready__.remote(), timeout=READY_TIMEOUT_S)
        return actor

    async def _reconnect(self) -> None:
        """After the back-off, make or find the actor again, off the event loop; requests meanwhile count
        against this replica's own buckets."""
        await asyncio.sleep(max(0.0, self.own_until - time.monotonic()))
        try:
            self.actor = await asyncio.to_thread(self._connect)
        except Exception as exc:
            self._fall_back(exc)
            return
        self._answered()

    async def _send_pending(self) -> None:
        while self.pending:
            batch, self.pending = self.pending[:MAX_BATCH], self.pending[MAX_BATCH:]
            key_ids = [key_id for key_id, _ in batch]
            try:
                waits = await asyncio.wait_for(self.actor.take.remote(key_ids), ASK_TIMEOUT_S)
                self._answered()
            except Exception as exc:  # TimeoutError, a RayError, anything: no request waits on a limiter fault
                self._fall_back(exc)
                waits = [self.own.take(key_id) for key_id in key_ids]
            for (_, answer), wait in zip(batch, waits):
                if not answer.done():  # its request may have been cancelled (the client went away)
                    answer.set_result(wait)
            if self.actor is None or time.monotonic() < self.own_until:  # the rest: this replica's buckets
                for key_id, answer in self.pending:
                    if not answer.done():
                        answer.set_result(self.own.take(key_id))
                self.pending = []

    def _answered(self) -> None:
        if self.unavailable:
            log.warning("the shared key limit %s answers again: the limit holds across replicas", self.name)
        self.unavailable = False
        self.own_until = 0.0

    def _fall_back(self, exc: Exception) -> None:
        if isinstance(exc, (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError)):
            self.actor = None  # dead, restarting or never up: made or found again after the back-off
        if not self.unavailable:
            log.warning("the shared key limit %s did not answer (%s): counting against this replica's own buckets, "
                        "asking again in %gs", self.name, type(exc).__name__, self.backoff_s)
        self.unavailable = True
        self.own_until = time.monotonic() + self.backoff_s
