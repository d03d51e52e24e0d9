import asyncio
import heapq
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conductor.config import ProviderSpec
from conductor.rate_limits import LimitWaitTooLong, ProviderLimits, send_margin
from conductor.window_peaks import fixed_window_peak, window_peak


def spec(**kwargs):
    return ProviderSpec(id="p", base_url="http://127.0.0.1:1/v1", **kwargs)


ROUNDING = 1e-9  # float rounding of sums of virtual times, nothing more


def assert_window_guarantee(arrivals, limit, window):
    """No window of ``window`` seconds, sliding or fixed (several alignments), holds more than ``limit``."""
    window -= ROUNDING
    assert window_peak(arrivals, window) <= limit, sorted(arrivals)
    for origin in (0.0, *(min(arrivals) + k * window / 4 for k in range(4))):
        assert fixed_window_peak(arrivals, window, origin) <= limit, (origin, sorted(arrivals))


def simulate(limits, requests, pauses=(), lower_to=None):
    """Drive ``limits`` on a virtual clock. ``requests``: [(gap before it wants to go, hook delay after admission,
    arrival delay after the send stamp)]; ``pauses``: [(at, seconds)]; ``lower_to``: (at, limit) for learn_limit.
    Requests queue in order and the head goes as soon as the limits allow; returns [(admitted, sent, arrival)]."""
    events, ready = [], 0.0  # (time, order, what): at one instant, controls, then sends, then the rest
    for index, (gap, _, _) in enumerate(requests):
        ready += gap
        events.append((ready, 2, ("queue", index)))
    events += [(at, 0, ("pause", seconds)) for at, seconds in pauses]
    events += [(lower_to[0], 0, ("lower", lower_to[1]))] if lower_to is not None else []
    heapq.heapify(events)
    queue, permits, out = [], {}, [None] * len(requests)
    while events:
        now, _, (kind, value) = heapq.heappop(events)
        if kind == "pause":
            limits.pause(value, now=now)
        elif kind == "lower":
            limits.learn_limit(value)
        elif kind == "send":
            stamp = permits[value].mark_sent(now)
            out[value] = (out[value][0], stamp, stamp + requests[value][2])
        elif kind == "queue":
            queue.append(value)
        while queue:
            wait = limits.wait_s(0, now)
            if wait is None:
                break  # a request admitted but not yet sent blocks: its "send" event comes
            if wait > 0:
                heapq.heappush(events, (now + max(wait, 1e-9), 3, ("wake", None)))
                break
            index = queue.pop(0)
            permits[index] = limits.admit(0, now)
            out[index] = (now, None, None)
            heapq.heappush(events, (now + requests[index][1], 1, ("send", index)))
    return out


timings = st.lists(st.tuples(st.floats(0, 0.5), st.floats(0, 0.4), st.floats(0, 1)), min_size=1, max_size=60)


@given(timings, st.integers(1, 8), st.sampled_from([0.5, 1.0, 3.0]), st.floats(0.05, 0.5))
def test_window_log_bounds_every_window_whatever_the_timing(requests, limit, window, margin):
    """The guarantee, on a virtual clock: any limit + 1 sends span >= W + m, so with any arrival delay in
    [d, d + m] after the send stamp no window of W (sliding or fixed) holds more than the limit."""
    limits = ProviderLimits(spec(rpm=limit, rate_window_s=window), margin_s=margin)
    arrival_delay = 0.05  # d: the part every request shares
    requests = [(gap, hook, arrival_delay + jitter * margin) for gap, hook, jitter in requests]
    out = simulate(limits, requests)
    assert window_peak([sent for _, sent, _ in out], window + margin - ROUNDING) <= limit
    assert_window_guarantee([arrival for _, _, arrival in out], limit, window)


@given(timings, st.integers(2, 8), st.floats(0.1, 3.0), st.floats(0.1, 2.0))
def test_window_log_holds_across_a_retry_after_pause(requests, limit, pause_at, pause_s):
    window, margin = 1.0, 0.2
    limits = ProviderLimits(spec(rpm=limit, rate_window_s=window), margin_s=margin)
    out = simulate(limits, [(gap, hook, 0.01 + jitter * margin) for gap, hook, jitter in requests],
                   pauses=[(pause_at, pause_s)])
    assert not any(pause_at <= admitted < pause_at + pause_s for admitted, _, _ in out)
    assert_window_guarantee([arrival for _, _, arrival in out], limit, window)


@given(timings, st.integers(5, 10), st.integers(1, 4), st.floats(0, 2.0))
def test_a_lowered_limit_counts_the_requests_already_sent(requests, limit, lowered, lower_at):
    window, margin = 1.0, 0.2
    limits = ProviderLimits(spec(rpm=limit, rate_window_s=window), margin_s=margin)
    out = simulate(limits, [(gap, hook, 0.01 + jitter * margin) for gap, hook, jitter in requests],
                   lower_to=(lower_at, lowered))
    # Every window of W + m that ends with a request admitted after the change holds <= the new limit.
    sent = sorted(stamp for _, stamp, _ in out)
    for admitted, stamp, _ in out:
        if admitted > lower_at:
            assert sum(1 for s in sent if stamp - window - margin + ROUNDING < s <= stamp) <= lowered


def test_an_admitted_request_not_yet_sent_counts_as_sent_now():
    limits = ProviderLimits(spec(rpm=2, rate_window_s=1.0), margin_s=0.1)
    first = limits.admit(0, 100.0)
    second = limits.admit(0, 100.0)
    assert limits.wait_s(0, 105.0) is None  # both still pending: when they go decides
    first.mark_sent(105.0)
    second.release(105.5)  # never marked: stamped when released
    assert limits.wait_s(0, 105.5) == pytest.approx(105.0 + 1.1 - 105.5)  # until the first stamp + W + m
    assert limits.wait_s(0, 106.1) == 0.0


def test_requests_are_paced_at_the_window_rate():
    limits = ProviderLimits(spec(rpm=10, rate_window_s=1.0), margin_s=0.1)
    interval = 1.1 / 10
    assert limits.wait_s(0, 50.0) == 0.0
    limits.admit(0, 50.0).mark_sent(50.0)
    assert limits.wait_s(0, 50.0) == pytest.approx(interval)  # no burst even with the window log empty
    assert limits.wait_s(0, 50.0 + interval) == 0.0


def test_default_margin():
    assert send_margin(60.0) == pytest.approx(1.2) and send_margin(2.0) == pytest.approx(0.5)
    assert ProviderLimits(spec(rate_window_s=60)).span == pytest.approx(61.2)


def test_start_up_burst_spreads_over_windows():
    """Sixteen concurrent calls on an empty log: the limiter's own send stamps (exact, whatever the load)."""
    limits = ProviderLimits(spec(rpm=5, rate_window_s=0.5), margin_s=0.1)
    stamps = []

    async def call():
        async with limits.slot(0, time.monotonic() + 30) as permit:
            stamps.append(permit.mark_sent())

    async def main():
        await asyncio.gather(*(call() for _ in range(16)))

    asyncio.run(main())
    assert len(stamps) == 16 and window_peak(stamps, 0.6) <= 5
    assert window_peak(stamps, 0.6 * 3) <= 15  # and nothing beyond that (no double counting)


def test_token_window_charges_up_front_and_refunds_from_usage():
    limits = ProviderLimits(spec(tpm=1000, rate_window_s=1.0), margin_s=0.1)
    permit = limits.admit(600, 10.0)
    permit.mark_sent(10.0)
    assert limits.tokens.used(10.0) == 600 and limits.wait_s(500, 10.0) > 0  # 600 + 500 > tpm
    permit.settle(150)  # the provider reported usage: the unused 450 are given back
    assert limits.tokens.used(10.0) == 150
    limits.token_pacer.due = -1  # (isolate the window from the smoothing)
    assert limits.wait_s(500, 10.0) == 0.0
    big = limits.admit(5000, 10.0)  # more than the whole window: charged tpm, alone in its window
    assert big.charged == 1000 and limits.wait_s(1, 10.0) is None
    big.mark_sent(10.0)
    assert limits.wait_s(1, 10.0) == pytest.approx(1.1)


@given(st.lists(st.tuples(st.floats(0, 0.3), st.integers(1, 400), st.floats(0, 1)), min_size=1, max_size=40))
def test_token_window_never_passes_tpm(calls):
    """Charges (refunded down to usage) of the requests sent in any W + m never pass tpm."""
    tpm, span = 1000, 1.1
    limits = ProviderLimits(spec(tpm=tpm, rate_window_s=1.0), margin_s=0.1)
    now, sent = 0.0, []
    for gap, charge, used in calls:
        now += gap
        while (wait := limits.wait_s(charge, now)) != 0:
            now += wait
        permit = limits.admit(charge, now)
        permit.mark_sent(now)
        permit.settle(int(charge * used))
        sent.append((now, int(charge * used)))
    for t, _ in sent:
        assert sum(tokens for s, tokens in sent if t - span + ROUNDING < s <= t) <= tpm


def test_pause_blocks_until_it_ends_or_the_deadline():
    limits = ProviderLimits(spec())
    limits.pause(0.3)

    async def main():
        started = time.monotonic()
        async with limits.slot(0, time.monotonic() + 5):
            waited = time.monotonic() - started
        limits.pause(5)
        with pytest.raises(LimitWaitTooLong):
            async with limits.slot(0, time.monotonic() + 0.2):
                pass
        return waited

    assert 0.25 <= asyncio.run(main()) < 1.0


def test_after_a_429_calls_go_one_at_a_time_until_one_succeeds():
    limits = ProviderLimits(spec(max_concurrency=8))
    limits.record_rate_limited()
    inside, peak, order = [0], [0], []

    async def call(i):
        async with limits.slot(0, time.monotonic() + 5):
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
            await asyncio.sleep(0.02)
            inside[0] -= 1
            order.append(i)
            if len(order) == 3:
                limits.record_success()  # the probe got through: back to concurrent calls

    async def main():
        await asyncio.gather(*(call(i) for i in range(8)))
        first_peak = peak[0]
        limits.record_rate_limited()
        order.append("no more successes")
        peak[0] = 0
        await asyncio.gather(*(call(i) for i in range(8)))
        return first_peak

    assert asyncio.run(main()) > 1  # after the probe's success, calls went concurrently again
    assert len(order) == 17 and peak[0] == 1  # no success this time: every call went alone


def test_concurrency_cap_and_deadline():
    limits = ProviderLimits(spec(max_concurrency=2))
    peak, active = [0], [0]

    async def call():
        async with limits.slot(0, time.monotonic() + 5):
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            await asyncio.sleep(0.05)
            active[0] -= 1

    async def main():
        await asyncio.gather(*(call() for _ in range(6)))

    asyncio.run(main())
    assert peak[0] == 2


def test_breaker_trips_on_a_failure_rate_not_a_streak():
    limits = ProviderLimits(spec(cooldown_after_failures=4, cooldown_failure_ratio=0.5, cooldown_s=10))
    for _ in range(3):
        limits.record_failure()
    for _ in range(10):
        limits.record_success()
    limits.record_failure()
    assert limits.cooldowns == 0  # 4 failures out of 14: scattered faults, no cooldown
    for _ in range(8):
        limits.record_failure()
    assert limits.cooldowns == 1 and limits.paused_until > time.monotonic() + 9


def test_limit_is_inferred_after_a_full_window_and_creeps_back_up(monkeypatch):
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    limits = ProviderLimits(spec(rpm=100, rate_window_s=1.0))
    for _ in range(20):
        limits.record_success()
        clock[0] += 0.02
    limits.record_rate_limited()  # only 0.4 s of history: too early to infer
    assert limits.rpm == 100 and limits.probing
    clock[0] += 0.7
    limits.record_success()
    limits.record_rate_limited()  # a full window seen; 16 accepted in the last second (t >= 1000.1)
    assert limits.rpm == pytest.approx(0.95 * 16) and limits.limit_inferred and limits.request_limit == 15
    clock[0] += 1.1
    limits.record_success()
    assert limits.rpm == pytest.approx(0.95 * 16 * 1.05)  # a quiet window: creep back up
    limits.learn_limit(7)
    assert limits.rpm == 7 and not limits.limit_inferred
