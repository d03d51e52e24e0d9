"""The pool against the real simulator over HTTP: faults of every kind, Retry-After, keys."""

import asyncio
import collections
import logging
import secrets
import time

import pytest

from conductor.config import FaultRates, PoolConfig, ProviderSpec, SimulatorConfig, WorkerSpec
from conductor.local_pool import LocalPool
from conductor.pool import WorkerCallError
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from conductor.tasks.toy import toy_tasks
from conductor.window_peaks import fixed_window_peak, window_peak

KEY_ENV = "CONDUCTOR_TEST_PROVIDER_KEY"
TASKS = toy_tasks(100)


def ask(task):
    return [{"role": "user", "content": f"Question:\n{task.prompt}\n\nSolve it."}]


def run_calls(pool, count, worker="toy-arith"):
    async def one(i):
        try:
            return await pool.chat(worker, ask(TASKS[i % len(TASKS)]))
        except WorkerCallError as exc:
            return exc

    async def main():
        try:
            return await asyncio.gather(*(one(i) for i in range(count)))
        finally:
            await pool.close()

    return asyncio.run(main())


def test_200_calls_with_20_percent_faults_of_every_kind(monkeypatch, caplog):
    key = "sk-test-" + secrets.token_hex(16)
    monkeypatch.setenv(KEY_ENV, key)
    caplog.set_level(logging.DEBUG)
    faults = FaultRates(rate_limit=0.04, server_error=0.04, timeout=0.04, disconnect=0.04, malformed=0.04, hang_s=2)
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0.2, toy_items_per_domain=100, faults=faults,
                             retry_after_s=0.5, api_key_env=KEY_ENV)
    with SimulatorServer(config) as sim:
        # A per-attempt timeout well above a loaded server's response delay (but under hang_s): otherwise a
        # slow 429 times out on the client, which then retries before Retry-After (a flake under CPU load).
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, api_key_env=KEY_ENV, timeout_s=1.2,
                                            max_retries=4, backoff_base_s=0.05, backoff_max_s=0.5, deadline_s=30,
                                            max_concurrency=16)
        pool = LocalPool(pool_config, seed=0)
        outcomes = run_calls(pool, 200)
        log = list(sim.state.log)
    counts = collections.Counter(entry["outcome"] for entry in log)
    for kind in ("fault_rate_limit", "fault_server_error", "fault_timeout", "fault_disconnect", "fault_malformed"):
        assert counts[kind] >= 3, counts  # every kind was injected
    assert counts["unauthorized"] == 0  # the key from the env var reached the server
    results = [o for o in outcomes if not isinstance(o, WorkerCallError)]
    failures = [o for o in outcomes if isinstance(o, WorkerCallError)]
    assert len(results) + len(failures) == 200
    assert all(r.retries <= 4 for r in results) and all(f.retries <= 4 for f in failures)
    assert all(f.kind in {"timeout", "server_error", "connection", "malformed_response", "rate_limited"}
               for f in failures), [str(f) for f in failures]
    assert len(results) >= 195 and any(r.retries > 0 for r in results)
    # Retry-After honoured: a call's next attempt after a 429 comes >= 0.5 s later (retry-after-ms). Entries are
    # logged when answered and stamped on arrival: order them by arrival (a hung attempt is logged late).
    attempts = collections.defaultdict(list)
    for entry in sorted(log, key=lambda entry: entry["t"]):
        attempts[entry["call_id"]].append(entry)
    gaps = [later["t"] - earlier["t"] for calls in attempts.values() for earlier, later in zip(calls, calls[1:])
            if earlier["status"] == 429]
    assert gaps and min(gaps) >= 0.5 - 0.02, gaps
    # The key never shows up: not in logs, errors, results or stats.
    visible = caplog.text + " ".join(map(str, failures)) + " ".join(r.text for r in results) + str(pool.stats())
    assert key not in visible


def test_non_retryable_errors_fail_fast(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-" + secrets.token_hex(8))
    monkeypatch.setenv("CONDUCTOR_SIM_EXPECTED_KEY", "sk-right-" + secrets.token_hex(8))
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20,
                             api_key_env="CONDUCTOR_SIM_EXPECTED_KEY", max_context_tokens=64)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, api_key_env=KEY_ENV, max_retries=5)
        [auth] = run_calls(LocalPool(pool_config), 1)
        assert isinstance(auth, WorkerCallError) and auth.kind == "auth" and auth.retries == 0
        assert "sk-wrong" not in str(auth) and sim.state.counts["unauthorized"] == 1
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20, max_context_tokens=64)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, max_retries=5)
        ghost = WorkerSpec(id="ghost", model="no-such-model", provider="sim", description="not served")
        pool = LocalPool(pool_config.model_copy(update={"workers": pool_config.workers + [ghost]}))

        async def main():
            long_prompt = [{"role": "user", "content": "word " * 400}]
            with pytest.raises(WorkerCallError) as context:
                await pool.chat("toy-arith", long_prompt)
            with pytest.raises(WorkerCallError) as missing:
                await pool.chat("ghost", [{"role": "user", "content": "hi"}])
            with pytest.raises(WorkerCallError) as bad_param:
                await pool.chat("toy-arith", [{"role": "user", "content": "hi"}], {"tools": []})
            await pool.close()
            return context.value, missing.value, bad_param.value

        context, missing, bad_param = asyncio.run(main())
        assert (context.kind, context.retries) == ("context_length", 0) and "maximum context length" in context.message
        assert (missing.kind, missing.retries) == ("not_found", 0)
        assert bad_param.kind == "bad_request"
        assert sim.state.counts["context_length"] == 1 and sim.state.counts["unknown_model"] == 1


def test_missing_key_env_is_a_clear_config_error(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    config = PoolConfig(providers=[ProviderSpec(id="p", base_url="http://127.0.0.1:9/v1", api_key_env=KEY_ENV)],
                        workers=[WorkerSpec(id="w", description="d", provider="p")])
    with pytest.raises(ValueError, match=f"{KEY_ENV} is not set"):
        LocalPool(config)


def test_server_rate_limit_settles_without_a_storm():
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20, rpm=5,
                             rate_window_s=1.0, retry_after_s=0.3)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, max_retries=20, deadline_s=30,
                                            rate_window_s=1.0)
        pool = LocalPool(pool_config)
        outcomes = run_calls(pool, 15)
        counts = sim.state.counts
    assert not any(isinstance(o, WorkerCallError) for o in outcomes)
    # Only the first wave, sent before any response could tell the client the limit, is refused;
    # afterwards the client runs at the limit the server reported (x-ratelimit-limit-requests).
    assert counts["ok"] == 15 and counts["rate_limited"] <= 10, counts
    assert pool.providers["sim"].limits.rpm == 5


def assert_no_window_over(arrivals, limit, window):
    """Strict: no window of ``window`` seconds holds more than ``limit`` arrivals, sliding or fixed (aligned
    to the epoch, as a provider's minutes are, and at quarter-window offsets from the first arrival)."""
    assert window_peak(arrivals, window) <= limit, sorted(arrivals)
    for origin in (0.0, *(min(arrivals) + k * window / 4 for k in range(4))):
        assert fixed_window_peak(arrivals, window, origin) <= limit, (origin, sorted(arrivals))


def test_a_start_up_burst_never_puts_more_than_the_limit_in_any_window():
    """15 concurrent calls on an empty budget, against a provider that enforces the same limit itself."""
    limit, window = 5, 1.0
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20, rpm=limit,
                             rate_window_s=window)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, rpm=limit, rate_window_s=window,
                                            deadline_s=60)
        outcomes = run_calls(LocalPool(pool_config), 15)
        log = list(sim.state.log)
    assert not any(isinstance(o, WorkerCallError) for o in outcomes)
    assert len(log) == 15 and all(entry["status"] == 200 for entry in log)  # the provider refused none
    assert_no_window_over([entry["t"] for entry in log], limit, window)


def test_after_a_retry_after_pause_the_window_still_holds():
    """Injected 429s with Retry-After pause the provider and start a probe; the requests after the pause (and
    every other) still fit the window, counting every arrival whatever its answer."""
    limit, window = 5, 1.0
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20, rpm=limit,
                             rate_window_s=window, retry_after_s=0.4, faults=FaultRates(rate_limit=0.25), seed=2)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, rpm=limit, rate_window_s=window,
                                            deadline_s=60, max_retries=10)
        outcomes = run_calls(LocalPool(pool_config), 10)
        log = list(sim.state.log)
    assert not any(isinstance(o, WorkerCallError) for o in outcomes)
    counts = collections.Counter(entry["outcome"] for entry in log)
    assert counts["fault_rate_limit"] >= 2 and counts["rate_limited"] == 0, counts
    assert_no_window_over([entry["t"] for entry in log], limit, window)


def test_the_send_time_is_stamped_when_the_request_goes_out():
    """The rate-limit log holds the time the request reached the HTTP transport (the client's request hook),
    not the end of the call: here every answer comes 0.5 s after the request arrived."""
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20,
                             faults=FaultRates(timeout=1.0, hang_s=0.5))
    with SimulatorServer(config) as sim:
        pool = LocalPool(simulated_pool_config(sim.state.preset, sim.base_url, rpm=100, timeout_s=30))
        started = time.monotonic()
        [outcome] = run_calls(pool, 1)
        ended = time.monotonic()
    assert not isinstance(outcome, WorkerCallError)
    [entry] = pool.providers["sim"].limits.requests.entries
    assert started < entry.stamp <= ended - 0.5

