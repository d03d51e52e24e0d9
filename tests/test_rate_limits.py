import asyncio
import time

import pytest

from conductor.config import ProviderSpec
from conductor.rate_limits import LimitWaitTooLong, ProviderLimits


def spec(**kwargs):
    return ProviderSpec(id="p", base_url="http://127.0.0.1:1/v1", **kwargs)


def test_requests_are_smoothed_to_the_rpm_over_a_short_window():
    limits = ProviderLimits(spec(rpm=10, rate_window_s=1.0))
    stamps = []

    async def call():
        async with limits.slot(0, time.monotonic() + 30):
            stamps.append(time.monotonic())

    async def main():
        await asyncio.gather(*(call() for _ in range(25)))

    asyncio.run(main())
    stamps.sort()
    for i, t in enumerate(stamps):
        assert sum(1 for s in stamps if t - 1.0 < s <= t) <= 10  # never more than rpm in any window
    rate = (len(stamps) - 1) / (stamps[-1] - stamps[0])
    assert 0.95 * 10 <= rate <= 10.0


def test_token_budget_is_charged_up_front_and_refunded():
    limits = ProviderLimits(spec(tpm=2000, rate_window_s=60))

    async def main():
        async with limits.slot(100, time.monotonic() + 5) as charge:
            level_before = limits.tokens._level
            charge.settle(10)
            return level_before, limits.tokens._level

    before, after = asyncio.run(main())
    assert before == pytest.approx(100, abs=1) and after == pytest.approx(10, abs=1)


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

    async def main():  # aiolimiter needs a running loop for its clock
        for _ in range(20):
            limits.record_success()
            clock[0] += 0.02
        limits.record_rate_limited()  # only 0.4 s of history: too early to infer
        assert limits.rpm == 100 and limits.probing
        clock[0] += 0.7
        limits.record_success()
        limits.record_rate_limited()  # a full window seen; 16 accepted in the last second (t >= 1000.1)
        assert limits.rpm == pytest.approx(0.95 * 16) and limits.limit_inferred
        clock[0] += 1.1
        limits.record_success()
        assert limits.rpm == pytest.approx(0.95 * 16 * 1.05)  # a quiet window: creep back up
        limits.learn_limit(7)
        assert limits.rpm == 7 and not limits.limit_inferred

    asyncio.run(main())
