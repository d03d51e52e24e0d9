"""A provider's budget: requests and tokens per window, in-flight calls, and provider-wide pauses.

The guarantee (W = ``rate_window_s``, L = the request limit, m = the send margin, t = now):

    send a request only if   sent(t - W - m, t]  +  admitted_not_yet_sent  <  L          (window log)
      =>  any L + 1 of our requests span >= W + m by our send clock
      =>  they span >= W by the provider's arrival clock, as long as (arrival - send) varies by <= m
      =>  no window of length W, sliding or fixed, ever holds more than L of our requests

    L = max(1, floor(rpm))         rpm: the configured limit, or a lower one learned from the provider
    m = max(SEND_MARGIN_S, SEND_MARGIN_SHARE * W)      0.5 s, or 2% of W (1.2 s for a 60 s window)
    cost: at most L per W + m, i.e. W / (W + m) of the limit (98% for W = 60 s, 80% for W = 2 s)

m covers the spread of the delay from our send stamp (taken once the request headers are written to the
socket) to the provider's arrival stamp: transit, a retransmitted segment (>= 0.2 s each), the provider's
own queueing before it counts the request. Measured with the simulator on loopback on a 2-core machine
under full CPU load: under 0.03 s (stamped before the SDK or at connect time instead, up to 0.25 s).

The log holds the send time of every request sent in the last W + m seconds (every attempt, whatever the
answer: counting a refused request too is the safe side). The send time is stamped once the request's
headers are written to the socket (``Permit.mark_sent``, called from the HTTP client), so the SDK's work,
connecting and any stall before the write are not part of the spread m absorbs; a stamp later than the
real send is always safe (the request only stays in the log longer). An admitted request not yet stamped
counts as sent *now*; one never stamped is stamped when its slot is released. The check runs right before
sending, with the limit current at that moment, so it holds from an empty log at start-up, after a
Retry-After pause, in the one-probe phase after a 429, and when the limit is lowered (a lower limit
applies to the requests already in the log). One ``ProviderLimits`` per provider per cluster (the Ray
WorkerPool actor) makes it hold across processes.

Tokens, the same log over charges:  charged(t - W - m, t]  +  charge  <=  tpm.  A call is charged
``prompt_estimate + max_tokens`` up front (at most tpm) and its entry is set to the response's ``usage``
afterwards: unused tokens are given back, extra ones added. So the charges in any window never pass tpm
(when they are checked; a later extra charge can push that one window over by the shortfall): a provider
counting usage sees more only when our prompt estimate (4 characters per token) was low, and one that
keeps its up-front estimate (max_tokens) without giving unused tokens back can see the refunded share
re-spent — configure tpm with headroom, or tight max_tokens, for such a provider.

Smoothing, so that a window's budget is not spent in a burst at its start (some providers enforce a
minute's limit per second) — the window log alone would send L requests at once:

    requests:  one every (W + m) / rpm seconds
    tokens:    tpm / (W + m) tokens per second, with a burst of at most tpm / TOKEN_BURST_FRACTION

A ``Retry-After`` from the provider pauses *every* call to it until then (no storm of retries).
A circuit breaker cools a failing provider down for ``cooldown_s`` when, over the last
``cooldown_window_s``,

    failures >= cooldown_after_failures   and   failures / attempts >= cooldown_failure_ratio

(a rate, not a streak: concurrent calls make streaks of ordinary, scattered faults). Rate-limit answers
do not count; Retry-After handles them. Calls wait for the budget first come, first served. Slots are
released before any retry sleep: a call never holds capacity while it waits to retry (it does hold its
in-flight slot while it waits for the rate budget, as before, so that its send follows the check at once).

When the provider's real limit is below the configured one:
- the limit it reports (``x-ratelimit-limit-requests``, per window) replaces the configured rpm when
  lower, so after the first responses the log and the smoothing run at the provider's real limit;
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
import math
import time
from collections.abc import AsyncIterator
from typing import Optional

from conductor.config import ProviderSpec
from conductor.pool_utilisation import BusyClock

SEND_MARGIN_S, SEND_MARGIN_SHARE = 0.5, 0.02
TOKEN_BURST_FRACTION = 20
INFERRED_SHARE, INFERRED_INCREASE = 0.95, 1.05
RECHECK_S = 0.25  # longest sleep between budget checks: a raised limit or a refund can shorten a wait
EPSILON = 1e-9


def send_margin(window_s: float) -> float:
    """m: how much the gap between our send stamp and the provider's arrival stamp may vary."""
    return max(SEND_MARGIN_S, SEND_MARGIN_SHARE * window_s)


class LimitWaitTooLong(TimeoutError):
    """Waiting for capacity would pass the call's deadline."""


class _Entry:
    __slots__ = ("amount", "stamp", "logged")

    def __init__(self, amount: float):
        self.amount = amount
        self.stamp: Optional[float] = None  # None: admitted, not yet sent
        self.logged = False  # stamped and still inside the log's span


class WindowLog:
    """Amounts (requests or tokens) by send time over the last ``span`` seconds; admitted amounts not yet
    sent count as sent now. Stamps must come from one non-decreasing clock."""

    def __init__(self, span: float):
        self.span = span
        self.entries: collections.deque[_Entry] = collections.deque()  # stamped, oldest first
        self.total = 0.0  # of self.entries
        self.pending = 0.0

    def _prune(self, now: float) -> None:
        while self.entries and self.entries[0].stamp + self.span <= now:  # the same sum as in wait_s
            entry = self.entries.popleft()
            entry.logged = False
            self.total -= entry.amount
        if not self.entries:
            self.total = 0.0  # no float drift left behind

    def used(self, now: float) -> float:
        self._prune(now)
        return self.total + self.pending

    def wait_s(self, amount: float, limit: float, now: float) -> Optional[float]:
        """Seconds until ``amount`` more fits under ``limit``: 0 = now, None = not before an admitted request
        is sent (its send time decides when it leaves the window)."""
        self._prune(now)
        excess = self.total + self.pending + amount - limit
        if excess <= EPSILON:
            return 0.0
        for entry in self.entries:
            excess -= entry.amount
            if excess <= EPSILON:
                return entry.stamp + self.span - now
        return None

    def admit(self, amount: float) -> _Entry:
        self.pending += amount
        return _Entry(amount)

    def stamp(self, entry: _Entry, now: float) -> None:
        if entry.stamp is not None:
            return
        self._prune(now)
        self.pending -= entry.amount
        entry.stamp, entry.logged = now, True
        self.entries.append(entry)
        self.total += entry.amount

    def resize(self, entry: _Entry, amount: float) -> None:
        if entry.stamp is None:
            self.pending += amount - entry.amount
        elif entry.logged:
            self.total += amount - entry.amount
        entry.amount = amount


class Pacer:
    """Spaces amounts ``interval`` seconds per unit apart, with a burst of up to ``burst_s`` seconds' worth
    (a virtual-scheduling / GCRA pacer: ``due`` is when everything taken so far would have been paid off)."""

    def __init__(self, interval: float, burst_s: float = 0.0):
        self.interval, self.burst_s = interval, burst_s
        self.due = -math.inf

    def wait_s(self, now: float) -> float:
        return max(0.0, self.due - self.burst_s - now)

    def take(self, amount: float, now: float) -> None:
        self.due = max(self.due, now) + amount * self.interval


class ProviderLimits:
    def __init__(self, spec: ProviderSpec, *, margin_s: Optional[float] = None):
        self.spec = spec
        self.margin_s = send_margin(spec.rate_window_s) if margin_s is None else margin_s
        self.span = spec.rate_window_s + self.margin_s
        self.rpm = spec.rpm
        self.requests = WindowLog(self.span)  # kept even without an rpm: a learned limit applies to it
        self.request_pacer = Pacer(self.span / spec.rpm) if spec.rpm else None
        self.tpm = spec.tpm
        self.tokens = WindowLog(self.span) if spec.tpm else None
        self.token_pacer = Pacer(self.span / spec.tpm, self.span / TOKEN_BURST_FRACTION) if spec.tpm else None
        self.in_flight = asyncio.Semaphore(spec.max_concurrency)
        self.gate = asyncio.Lock()  # calls wait for the budget one at a time, first come first served
        self.paused_until = 0.0
        self.probing = False
        self.probe = asyncio.Lock()
        self.first_success: Optional[float] = None
        self.recent_successes: collections.deque[float] = collections.deque()
        self.limit_inferred = False
        self.limit_changed_at = 0.0
        self.outcomes: collections.deque[tuple[float, bool]] = collections.deque()  # (time, failed)
        self.cooldowns = 0
        self.waiting = BusyClock()  # a call queued for a slot or the budget (conductor/pool_utilisation.py)
        self.sending = BusyClock()  # a request out at the provider

    @property
    def request_limit(self) -> Optional[int]:
        """L: requests allowed in any window (None: no request limit)."""
        return None if self.rpm is None else max(1, math.floor(self.rpm + EPSILON))

    def pause(self, seconds: float, now: Optional[float] = None) -> None:
        now = time.monotonic() if now is None else now
        self.paused_until = max(self.paused_until, now + seconds)

    def wait_s(self, token_charge: float, now: float) -> Optional[float]:
        """Seconds until a request charging ``token_charge`` may be sent: 0 = now, None = not before a request
        admitted earlier is sent. A pure function of the state and ``now`` (no clock inside)."""
        waits: list[Optional[float]] = [self.paused_until - now]
        if self.request_limit is not None:
            waits += [self.requests.wait_s(1, self.request_limit, now), self.request_pacer.wait_s(now)]
        if self.tokens is not None:
            waits += [self.tokens.wait_s(self._clamp(token_charge), self.tpm, now), self.token_pacer.wait_s(now)]
        if any(w is None for w in waits):
            return None
        return max(0.0, *waits)

    def admit(self, token_charge: float, now: float) -> Permit:
        """Take the budget for one request sent now or shortly (only when ``wait_s`` is 0)."""
        request_entry = self.requests.admit(1)
        if self.request_pacer is not None:
            self.request_pacer.take(1, now)
        token_entry, charged = None, 0
        if self.tokens is not None:
            charged = int(self._clamp(token_charge))
            token_entry = self.tokens.admit(charged)
            self.token_pacer.take(charged, now)
        return Permit(self, request_entry, token_entry, charged)

    def _clamp(self, token_charge: float) -> float:
        return min(max(token_charge, 0), self.tpm) if self.tpm else 0

    @contextlib.asynccontextmanager
    async def slot(self, token_charge: int, deadline: float) -> AsyncIterator[Permit]:
        """Hold one in-flight slot, one request and ``token_charge`` tokens for the duration of a call.

        Calls wait for the budget in arrival order (one at a time through ``gate``), and the budget is checked
        and taken with no await in between, right before the caller sends. After a 429 a call also holds the
        probe lock for its whole attempt, so only one request is out until one succeeds."""
        with self.waiting.held():
            await self._acquire(self.in_flight, deadline, "no free slot at provider {id} before the deadline")
        probe_held = False
        try:
            with self.waiting.held():
                while True:
                    if self.probing and not probe_held:
                        await self._acquire(self.probe, deadline, "provider {id} is still rate limiting")
                        probe_held = True
                    await self._acquire(self.gate, deadline, "rate budget of provider {id} busy until the deadline")
                    try:
                        permit = await self._admit_when_allowed(token_charge, deadline, probe_held)
                    finally:
                        self.gate.release()
                    if permit is not None:
                        break
            if probe_held and not self.probing:  # a probe got through while this call queued for the lock
                self.probe.release()
                probe_held = False
            try:
                with self.sending.held():
                    yield permit
            finally:
                permit.release()
        finally:
            if probe_held:
                self.probe.release()
            self.in_flight.release()

    async def _acquire(self, lock: asyncio.Semaphore | asyncio.Lock, deadline: float, message: str) -> None:
        try:
            await asyncio.wait_for(lock.acquire(), timeout=max(deadline - time.monotonic(), 0.001))
        except TimeoutError:
            raise LimitWaitTooLong(message.format(id=self.spec.id)) from None

    async def _admit_when_allowed(self, token_charge: int, deadline: float, probe_held: bool) -> Optional[Permit]:
        """Sleep until the budget allows this call, then admit it; None if it must first take the probe lock."""
        while True:
            now = time.monotonic()
            if self.probing and not probe_held:
                return None  # a 429 came in while this call queued
            wait = self.wait_s(token_charge, now)
            if wait == 0:
                return self.admit(token_charge, now)
            if wait is not None and now + wait > deadline:
                if self.paused_until > deadline:
                    raise LimitWaitTooLong(f"provider {self.spec.id} is paused for {self.paused_until - now:.1f}s more")
                raise LimitWaitTooLong(f"rate budget of provider {self.spec.id} exhausted until past the deadline")
            if now >= deadline:
                raise LimitWaitTooLong(f"rate budget of provider {self.spec.id} exhausted until the deadline")
            await asyncio.sleep(min(RECHECK_S if wait is None else wait, RECHECK_S, deadline - now))

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
        """A new limit applies to the next check, over the requests already in the log; waiting calls see
        it when they check again (within RECHECK_S)."""
        self.rpm = rpm
        self.limit_changed_at = time.monotonic()
        if self.request_pacer is None:
            self.request_pacer = Pacer(self.span / rpm)
        else:
            self.request_pacer.interval = self.span / rpm

    def _record(self, failed: bool) -> None:
        now = time.monotonic()
        self.outcomes.append((now, failed))
        while self.outcomes and self.outcomes[0][0] < now - self.spec.cooldown_window_s:
            self.outcomes.popleft()


class Permit:
    """One admitted request: its place in the request log and its token charge, settled against the real
    usage afterwards."""

    def __init__(self, limits: ProviderLimits, request: _Entry, tokens: Optional[_Entry], charged: int):
        self.limits = limits
        self.request = request
        self.token_entry = tokens
        self.charged = charged

    def mark_sent(self, now: Optional[float] = None) -> float:
        """Stamp the send time (the first call counts); returns it."""
        if self.request.stamp is None:
            now = time.monotonic() if now is None else now
            self.limits.requests.stamp(self.request, now)
            if self.token_entry is not None:
                self.limits.tokens.stamp(self.token_entry, now)
        return self.request.stamp

    @property
    def sent(self) -> bool:
        """Its request headers went out: the provider may have started (and billed) the work."""
        return self.request.stamp is not None

    def release(self, now: Optional[float] = None) -> None:
        """End of the attempt: a request never marked as sent is stamped now (no earlier than its real send)."""
        self.mark_sent(now)

    def settle(self, actual_tokens: Optional[int]) -> None:
        """Replace the up-front token charge by the usage the provider reported."""
        limits = self.limits
        if self.token_entry is None or actual_tokens is None:
            return
        amount = int(limits._clamp(actual_tokens))
        difference = amount - self.token_entry.amount
        limits.tokens.resize(self.token_entry, amount)
        limits.token_pacer.due += difference * limits.token_pacer.interval
