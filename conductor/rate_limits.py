"""A provider's budget: requests and tokens per window, in-flight calls, and provider-wide pauses.

Limits (aiolimiter leaky buckets, smoothed so no window sees a burst):

    requests:  bucket of 1 request refilled every  1.02 * W / rpm  seconds  -> under rpm per window W
               (the 2% margin absorbs network jitter between our clock and the provider's)
    tokens:    bucket of tpm / 20 tokens refilled over  W / 20  seconds  -> at most 1.05 * tpm per window W

A call is charged ``prompt_estimate + max_tokens`` tokens up front (a charge larger than the bucket is
clamped to it) and reconciled from the response's ``usage``: unused tokens are given back, extra tokens
taken. A ``Retry-After`` from the provider pauses *every* call to it until then (no storm of retries).
A circuit breaker cools a failing provider down for ``cooldown_s`` when, over the last
``cooldown_window_s``,

    failures >= cooldown_after_failures   and   failures / attempts >= cooldown_failure_ratio

(a rate, not a streak: concurrent calls make streaks of ordinary, scattered faults). Rate-limit answers
do not count; Retry-After handles them. Slots are released before any retry sleep: a call never holds
capacity while it waits.

When the provider's real limit is below the configured one:
- the limit it reports (``x-ratelimit-limit-requests``, per window) replaces the configured rpm when
  lower, so after the first responses the smoothing above runs at the provider's real rate;
- after a 429, calls go one at a time (a probe) until one succeeds, so the end of a Retry-After pause
  releases one request, not a wave of them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from typing import AsyncIterator, Optional

from aiolimiter import AsyncLimiter

from conductor.config import ProviderSpec

TOKEN_BUCKET_FRACTION = 20
REQUEST_MARGIN = 1.02


class LimitWaitTooLong(TimeoutError):
    """Waiting for capacity would pass the call's deadline."""


class ProviderLimits:
    def __init__(self, spec: ProviderSpec):
        self.spec = spec
        window = spec.rate_window_s
        self.rpm = spec.rpm
        self.requests = AsyncLimiter(1, REQUEST_MARGIN * window / spec.rpm) if spec.rpm else None
        self.token_capacity = spec.tpm / TOKEN_BUCKET_FRACTION if spec.tpm else None
        self.tokens = AsyncLimiter(self.token_capacity, window / TOKEN_BUCKET_FRACTION) if spec.tpm else None
        self.in_flight = asyncio.Semaphore(spec.max_concurrency)
        self.paused_until = 0.0
        self.probing = False
        self.probe = asyncio.Lock()
        self.outcomes: collections.deque[tuple[float, bool]] = collections.deque()  # (time, failed)
        self.cooldowns = 0

    def pause(self, seconds: float) -> None:
        self.paused_until = max(self.paused_until, time.monotonic() + seconds)

    async def wait_until_unpaused(self, deadline: float) -> None:
        while (wait := self.paused_until - time.monotonic()) > 0:
            if time.monotonic() + wait > deadline:
                raise LimitWaitTooLong(f"provider {self.spec.id} is paused for {wait:.1f}s more")
            await asyncio.sleep(wait)

    @contextlib.asynccontextmanager
    async def slot(self, token_charge: int, deadline: float) -> AsyncIterator["TokenCharge"]:
        """Hold one in-flight slot, one request and ``token_charge`` tokens for the duration of a call."""
        remaining = deadline - time.monotonic()
        try:
            await asyncio.wait_for(self.in_flight.acquire(), timeout=max(remaining, 0.001))
        except asyncio.TimeoutError:
            raise LimitWaitTooLong(f"no free slot at provider {self.spec.id} before the deadline") from None
        try:
            if self.probing:
                try:
                    await asyncio.wait_for(self.probe.acquire(), timeout=max(deadline - time.monotonic(), 0.001))
                except asyncio.TimeoutError:
                    raise LimitWaitTooLong(f"provider {self.spec.id} is still rate limiting") from None
                try:
                    yield await self._acquire_rate(token_charge, deadline)
                finally:
                    self.probe.release()
            else:
                yield await self._acquire_rate(token_charge, deadline)
        finally:
            self.in_flight.release()

    async def _acquire_rate(self, token_charge: int, deadline: float) -> "TokenCharge":
        async def acquire() -> TokenCharge:
            await self.wait_until_unpaused(deadline)
            if self.requests is not None:
                await self.requests.acquire()
            charged = 0
            if self.tokens is not None:
                charged = int(min(token_charge, self.token_capacity))
                await self.tokens.acquire(charged)
            return TokenCharge(self, charged)

        try:
            return await asyncio.wait_for(acquire(), timeout=max(deadline - time.monotonic(), 0.001))
        except asyncio.TimeoutError:
            raise LimitWaitTooLong(f"rate budget of provider {self.spec.id} exhausted until past the deadline") from None

    def record_success(self) -> None:
        self._record(failed=False)
        self.probing = False

    def record_rate_limited(self) -> None:
        self.probing = True

    def learn_limit(self, limit_requests: int) -> None:
        """Adopt the provider's reported request limit when it is below ours."""
        if limit_requests >= 1 and (self.rpm is None or limit_requests < self.rpm):
            self.rpm = float(limit_requests)
            self.requests = AsyncLimiter(1, REQUEST_MARGIN * self.spec.rate_window_s / self.rpm)

    def record_failure(self) -> None:
        """Count a transient failure (not a rate limit); trip the breaker if the recent rate is high."""
        self._record(failed=True)
        failures = sum(failed for _, failed in self.outcomes)
        if (failures >= self.spec.cooldown_after_failures and self.spec.cooldown_s > 0
                and failures / len(self.outcomes) >= self.spec.cooldown_failure_ratio):
            self.pause(self.spec.cooldown_s)
            self.cooldowns += 1
            self.outcomes.clear()

    def _record(self, failed: bool) -> None:
        now = time.monotonic()
        self.outcomes.append((now, failed))
        while self.outcomes and self.outcomes[0][0] < now - self.spec.cooldown_window_s:
            self.outcomes.popleft()


class TokenCharge:
    """The tokens charged up front for one call, settled against the real usage afterwards."""

    def __init__(self, limits: ProviderLimits, charged: int):
        self.limits = limits
        self.charged = charged

    def settle(self, actual_tokens: Optional[int]) -> None:
        bucket = self.limits.tokens
        if bucket is None or actual_tokens is None:
            return
        difference = int(min(actual_tokens, self.limits.token_capacity)) - self.charged
        if difference:
            # aiolimiter has no public refund/extra-charge call; its fill level (_level, drained by _leak)
            # is the leaky-bucket state. Over-capacity levels simply make later calls wait longer.
            bucket._leak()
            bucket._level = max(0.0, bucket._level + difference)
            bucket._wake_next()
