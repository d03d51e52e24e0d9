"""The pool's utilisation arithmetic, Ray-free: busy time counts overlapping calls once, the meter sums only
the spans it was running and leaves out a span whose counters restarted, and the ratios against rpm and tpm
are per rate window. The provider limits' clocks are read off a real ``ProviderLimits``."""

import asyncio
import time

import pytest

from conductor.config import ProviderSpec
from conductor.pool_utilisation import COUNTERS, BusyClock, PoolMeter, utilisation
from conductor.rate_limits import ProviderLimits


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_busy_clock_counts_overlapping_holders_once():
    clock = FakeClock()
    busy = BusyClock(clock)
    busy.enter()          # t=0: one call
    clock.now = 1.0
    busy.enter()          # t=1: two, overlapping
    clock.now = 3.0
    busy.leave()
    clock.now = 4.0
    busy.leave()          # t=4: idle
    clock.now = 10.0
    assert busy.seconds() == 4.0
    with busy.held():
        clock.now = 12.0
        assert busy.seconds() == 6.0  # a span still open counts up to now
    assert busy.seconds() == 6.0


def test_utilisation_is_per_rate_window():
    totals = {"seconds": 100.0, "attempts": 90.0, "prompt_tokens": 3000.0, "completion_tokens": 1000.0,
              "sending_s": 95.0, "waiting_s": 80.0}
    figures = utilisation(totals, rpm=60, tpm=6000, window_s=60)
    assert figures["requests_per_s"] == pytest.approx(0.9)
    assert figures["rpm_ratio"] == pytest.approx(0.9)          # 0.9 requests/s against 60 per 60 s
    assert figures["tokens_per_window"] == pytest.approx(2400)  # 4000 tokens in 100 s, per 60 s
    assert figures["tpm_ratio"] == pytest.approx(0.4)
    assert (figures["busy"], figures["waiting"]) == (pytest.approx(0.95), pytest.approx(0.8))
    assert utilisation(totals, rpm=None, tpm=None, window_s=60)["rpm_ratio"] is None
    with pytest.raises(ValueError, match="more than 0 seconds"):
        utilisation(dict(totals, seconds=0.0), rpm=60, tpm=None, window_s=60)


def snapshot(clock_s: float, attempts: float, **limits) -> dict:
    counters = dict.fromkeys(COUNTERS, 0.0)
    counters.update(attempts=attempts, calls=attempts, prompt_tokens=10 * attempts, sending_s=clock_s / 2)
    return {**counters, "clock_s": clock_s, "configured_rpm": 120.0, "tpm": None, "rate_window_s": 60.0, **limits}


def test_meter_sums_running_spans_only_and_drops_a_restarted_one():
    readings = iter([
        {"sim": snapshot(0, 0)}, {"sim": snapshot(10, 20)},     # training: 20 requests in 10 s
        {"sim": snapshot(30, 50)}, {"sim": snapshot(40, 70)},   # (validation between) training: 20 in 10 s
        {"sim": snapshot(50, 80)}, {"sim": snapshot(60, 5)},    # the pool actor restarted: counters went back
        {"sim": snapshot(70, 10)}, {},                          # a pool actor that did not answer
    ])
    meter = PoolMeter()
    for _ in range(4):
        meter.resume(next(readings))
        meter.resume({"sim": snapshot(1000, 1000)})  # already running: not a span's start
        meter.pause(next(readings))
    meter.pause({"sim": snapshot(2000, 2000)})       # not running: not a span's end
    report = meter.report()["sim"]
    assert (report["seconds"], report["attempts"], report["prompt_tokens"]) == (20.0, 40.0, 400.0)
    assert report["rpm_ratio"] == pytest.approx(1.0)  # 2 requests/s against 120 per 60 s
    assert report["busy"] == pytest.approx(0.5)
    assert report["tpm_ratio"] is None
    assert meter.lost_spans == 2


def test_provider_limits_clock_waiting_and_sending():
    limits = ProviderLimits(ProviderSpec(id="p", base_url="http://127.0.0.1:9/v1", rpm=2, rate_window_s=0.2))
    pace = limits.span / 2  # the request pacer spaces the second call this far after the first

    async def call() -> None:
        async with limits.slot(0, deadline=time.monotonic() + 30):
            await asyncio.sleep(0.01)

    async def both() -> None:
        await asyncio.gather(call(), call())

    asyncio.run(both())
    assert limits.waiting.seconds() >= pace - 0.05  # the second call queued for the budget at least this long
    assert limits.sending.seconds() >= 0.02 - 1e-3  # two attempts out, one after the other
    assert limits.waiting.holders == limits.sending.holders == 0


def test_provider_limit_bench_table_names_the_best_mode_against_the_bar():
    from argparse import Namespace

    from bench.provider_limit import table

    def result(k: int, rpm_ratio: float, accuracy: float) -> dict:
        pool = {"seconds": 100.0, "requests_per_s": 10 * rpm_ratio, "rpm_ratio": rpm_ratio, "tpm_ratio": None,
                "tokens_per_window": 1000.0, "busy": 0.9, "waiting": 0.5, "rate_limited": 0.0}
        return {"k": k, "pool": pool, "max_lag": k, "summary": {"steps": 50, "heldout_accuracy": accuracy}}

    args = Namespace(steps=50, latency_scale=40.0, rpm=600, tpm=0, concurrency=128)
    text = table([result(0, 0.7, 0.70), result(2, 0.95, 0.68)], args)
    assert "| async k = 2 | 0.500 | 9.50 | 0.950 | 1000 | - |" in text
    assert "| 0 | 2 behind | 0.680 | -0.020 |" in text  # 429s, staleness, accuracy against sync's
    assert "Best: k = 2 at 0.950 of the rpm (meets the bar 0.9" in text
    assert "misses the bar" in table([result(0, 0.7, 0.7)], args)


def test_a_span_over_a_restart_is_dropped_even_when_the_new_counters_are_higher():
    meter = PoolMeter()
    meter.resume({"sim": snapshot(0, 10, incarnation="first")})
    meter.pause({"sim": snapshot(10, 30, incarnation="second")})  # restarted; its clock and counts rose anyway
    assert meter.lost_spans == 1 and meter.report() == {}
