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
- without such a header, a 429 after at least one full window of traffic adopts INFERRED_SHARE of the
  requests the provider accepted in the last window as the limit (for a window-counting provider, that
  count is its limit); an inferred limit rises by INFERRED_INCREASE per window without a 429, so a
  chance 429 does not cap the rate for good;
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
INFERRED_SHARE, INFERRED_INCREASE = 0.95, 1.05


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
        self.first_success: Optional[float] = None
        self.recent_successes: collections.deque[float] = collections.deque()
        self.limit_inferred = False
        self.limit_changed_at = 0.0
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
            charge = await self._acquire_rate(token_charge, deadline)
            if not self.probing:
                yield charge
                return
            # Checked after the pacing wait, right before sending: a call that queued before the 429
            # must not fire into a provider that is refusing.
            try:
                await asyncio.wait_for(self.probe.acquire(), timeout=max(deadline - time.monotonic(), 0.001))
            except asyncio.TimeoutError:
                raise LimitWaitTooLong(f"provider {self.spec.id} is still rate limiting") from None
            try:
                await self.wait_until_unpaused(deadline)
                yield charge
            finally:
                self.probe.release()
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
        now = time.monotonic()
        self._record(failed=False)
        self.probing = False
        self.first_success = self.first_success or now
        self.recent_successes.append(now)
        window = self.spec.rate_window_s
        while self.recent_successes[0] < now - window:
            self.recent_successes.popleft()
        if self.limit_inferred and now - self.limit_changed_at >= window:
            raised = self.rpm * INFERRED_INCREASE
            if self.spec.rpm is not None and raised >= self.spec.rpm:
                self._set_rpm(self.spec.rpm)
                self.limit_inferred = False
            else:
                self._set_rpm(raised)

    def record_failure(self) -> None:
        """Count a transient failure (not a rate limit); trip the breaker if the recent rate is high."""
        self._record(failed=True)
        failures = sum(failed for _, failed in self.outcomes)
        if (failures >= self.spec.cooldown_after_failures and self.spec.cooldown_s > 0
                and failures / len(self.outcomes) >= self.spec.cooldown_failure_ratio):
            self.pause(self.spec.cooldown_s)
            self.cooldowns += 1
            self.outcomes.clear()

    def record_rate_limited(self) -> None:
        self.probing = True
        now = time.monotonic()
        window = self.spec.rate_window_s
        if self.first_success is not None and now - self.first_success >= window:
            estimate = INFERRED_SHARE * sum(1 for t in self.recent_successes if t >= now - window)
            if estimate >= 1 and (self.rpm is None or estimate < self.rpm):
                self._set_rpm(estimate)
                self.limit_inferred = True

    def learn_limit(self, limit_requests: int) -> None:
        """Adopt the limit the provider reports (x-ratelimit-limit-requests) when it is below ours."""
        if limit_requests >= 1 and (self.rpm is None or limit_requests < self.rpm):
            self._set_rpm(float(limit_requests))
            self.limit_inferred = False

    def _set_rpm(self, rpm: float) -> None:
        """Retune the request bucket in place (aiolimiter keeps the rate in ``time_period`` /
        ``_rate_per_sec``) so calls already waiting on it slow down too; a new bucket would let them
        through at the old rate."""
        self.rpm = rpm
        self.limit_changed_at = time.monotonic()
        interval = REQUEST_MARGIN * self.spec.rate_window_s / rpm
        if self.requests is None:
            self.requests = AsyncLimiter(1, interval)
        else:
            self.requests.time_period = interval
            self.requests._rate_per_sec = self.requests.max_rate / interval

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
