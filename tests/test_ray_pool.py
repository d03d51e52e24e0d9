"""WorkerPool actors on a real local Ray cluster: one budget per provider across processes."""

import asyncio
import collections
import time

import pytest
import ray

from conductor.config import SimulatorConfig
from conductor.pool import ReplayMiss, WorkerCallError
from conductor.response_cache_config import ResponseCacheConfig
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from conductor.window_peaks import fixed_window_peak, window_peak
from tests.support.sim_helpers import ask

pytestmark = pytest.mark.slow
# A limit low enough that two processes starved of CPU (Ray workers run at nice 15) still exceed it together
# in the negative control, and calls enough for three windows' worth of budget.
RPM, WINDOW_S, CALLS_PER_PROCESS = 5, 2.0, 8


@ray.remote(num_cpus=0.25)
class RolloutProcess:
    """Stands in for a rollout worker: its own process, calling workers through a pool."""

    def __init__(self, pool_config, shared: bool):
        if shared:
            from actors.worker_pool import RayPool
            self.pool = RayPool(pool_config)
        else:
            from conductor.local_pool import LocalPool
            self.pool = LocalPool(pool_config)

    def ready(self) -> bool:
        return True

    async def run(self, messages_list, start_at: float):
        async def one(messages):
            try:
                return (await self.pool.chat("toy-arith", messages)).text
            except WorkerCallError as exc:
                return exc.kind

        await asyncio.sleep(max(0.0, start_at - time.time()))  # both processes burst at the same moment
        return await asyncio.gather(*(one(m) for m in messages_list))


def two_processes(sim, shared):
    pool_config = simulated_pool_config(sim.state.preset, sim.base_url, rpm=RPM, rate_window_s=WINDOW_S,
                                        deadline_s=120)
    tasks = list(sim.state.preset.tasks)
    processes = [RolloutProcess.remote(pool_config, shared) for _ in range(2)]
    ray.get([p.ready.remote() for p in processes])  # both started (and attached to the pool actor) first
    batches = [[ask(t) for t in tasks[i * CALLS_PER_PROCESS:(i + 1) * CALLS_PER_PROCESS]] for i in range(2)]
    start_at = time.time() + 0.5
    results = ray.get([p.run.remote(b, start_at) for p, b in zip(processes, batches)])
    for process in processes:
        ray.kill(process)
    return [text for batch in results for text in batch]


def test_two_processes_sharing_a_provider_never_exceed_its_rpm(ray_local):
    """Both processes burst at once through the shared actor; the provider enforces the same limit. Every
    arrival counts (any answer), in every window of W: sliding, and fixed at the epoch and at offsets."""
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20, rpm=RPM,
                             rate_window_s=WINDOW_S)
    with SimulatorServer(config) as sim:
        texts = two_processes(sim, shared=True)
        log = list(sim.state.log)
    assert len(texts) == 2 * CALLS_PER_PROCESS and all(t.startswith(("####", "Working", "Answer")) for t in texts)
    assert collections.Counter(e["status"] for e in log) == {200: 2 * CALLS_PER_PROCESS}  # no 429, no retry
    arrivals = [e["t"] for e in log]
    assert window_peak(arrivals, WINDOW_S) <= RPM, sorted(arrivals)
    for origin in (0.0, *(min(arrivals) + k * WINDOW_S / 4 for k in range(4))):
        assert fixed_window_peak(arrivals, WINDOW_S, origin) <= RPM, (origin, sorted(arrivals))


def test_without_the_shared_actor_the_same_load_exceeds_the_rpm(ray_local):
    """Negative control: per-process budgets add up, which is why pools are actors."""
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
    with SimulatorServer(config) as sim:
        two_processes(sim, shared=False)
        arrivals = [e["t"] for e in sim.state.log if e["status"] == 200]
    assert len(arrivals) == 2 * CALLS_PER_PROCESS
    assert window_peak(arrivals, WINDOW_S) > RPM


def test_a_killed_pool_actor_is_an_infra_error_not_a_hang(ray_local):
    from actors.worker_pool import RayPool

    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url)
        pool = RayPool(pool_config)
        task = sim.state.preset.tasks[0]
        first = asyncio.run(pool.chat("toy-arith", ask(task)))
        assert first.completion_tokens > 0
        assert ray.get(pool.actors["sim"].stats.remote())["calls"] == 1
        stop_pool_actor()  # and waits: a call between ray.kill and the actor's death is served
        with pytest.raises(WorkerCallError) as info:
            asyncio.run(pool.chat("toy-arith", ask(task)))
        assert info.value.kind == "actor_unavailable"


def test_attaching_to_a_pool_actor_with_another_config_is_refused(ray_local):
    from actors.worker_pool import RayPool

    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
    with SimulatorServer(config) as sim:
        first = RayPool(simulated_pool_config(sim.state.preset, sim.base_url, rpm=100))
        same = RayPool(simulated_pool_config(sim.state.preset, sim.base_url, rpm=100))
        assert same.actors["sim"]._actor_id == first.actors["sim"]._actor_id
        with pytest.raises(ValueError, match="different provider or worker config"):
            RayPool(simulated_pool_config(sim.state.preset, sim.base_url, rpm=5))
        ray.kill(first.actors["sim"], no_restart=True)


def test_a_replay_only_pool_actor_serves_its_cache_and_a_miss_crosses_as_replay_miss(ray_local, tmp_path):
    from actors.worker_pool import RayPool

    with SimulatorServer(SimulatorConfig(preset="toy", port=0, latency_scale=0.0)) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url)
        for mode in ("read-write", "replay-only"):
            cache = ResponseCacheConfig(mode=mode, path=str(tmp_path))
            pool = RayPool(pool_config.model_copy(update={"cache": cache}))
            reply = asyncio.run(pool.chat("toy-arith", ask(sim.state.preset.tasks[0])))
            assert reply.cached == (mode == "replay-only")
            pool.flush()
            stop_pool_actor()
        assert sum(sim.state.counts.values()) == 1
        pool = RayPool(pool_config.model_copy(update={"cache": cache}))
        try:
            with pytest.raises(ReplayMiss, match="holds no answer for worker toy-arith"):
                asyncio.run(pool.chat("toy-arith", ask(sim.state.preset.tasks[1])))
            assert pool.stats()["sim"]["cache"]["misses"] == 1
        finally:
            stop_pool_actor()


def test_a_restarted_pool_actor_counts_on_from_the_counts_it_was_started_with(ray_local, tmp_path):
    """Ray restarts a pool actor with the arguments it was made with: a resumed run's counts, not nothing, so
    the restarted actor is not served the answers of the segments before (cluster/cache_occurrences.py)."""
    from actors.worker_pool import RayPool, actor_name

    with SimulatorServer(SimulatorConfig(preset="toy", port=0, latency_scale=0.0)) as sim:
        cache = ResponseCacheConfig(mode="read-write", path=str(tmp_path))
        pool = RayPool(simulated_pool_config(sim.state.preset, sim.base_url).model_copy(update={"cache": cache}),
                       occurrences={"sim": {"kept-digest": 5}})
        try:
            asyncio.run(pool.chat("toy-arith", ask(sim.state.preset.tasks[0])))
            assert len(pool.occurrences()["sim"]) == 2
            before = ray.get(pool.actors["sim"].pid.remote())
            ray.kill(ray.get_actor(actor_name("sim")), no_restart=False)
            back_by = time.monotonic() + 120
            while True:  # calls fail while it restarts
                try:
                    if ray.get(pool.actors["sim"].pid.remote(), timeout=10) != before:
                        break
                except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
                    pass
                assert time.monotonic() < back_by, "the pool actor did not come back"
                time.sleep(0.5)
            assert pool.occurrences()["sim"] == {"kept-digest": 5}
        finally:
            stop_pool_actor()


def stop_pool_actor():
    """Kill the provider's pool actor and wait until its name is free (ray.kill returns before it is)."""
    from actors.worker_pool import actor_name

    ray.kill(ray.get_actor(actor_name("sim")), no_restart=True)
    gone_by = time.monotonic() + 60
    while time.monotonic() < gone_by:
        try:
            ray.get_actor(actor_name("sim"))
        except ValueError:
            return
        time.sleep(0.05)


def test_a_capped_call_through_the_pool_actor_is_not_retried_after_a_billed_failure(ray_local):
    """``max_billable_attempts`` crosses to the actor, streamed or not, and what the failed attempt was billed
    crosses back on the error (the endpoint's cap counts it)."""
    from actors.worker_pool import RayPool
    from conductor.config import PoolConfig, ProviderSpec, WorkerSpec
    from tests.support.reply_server import ReplyServer, Streamed, chunk, completion

    def reply(body):
        if body.get("stream"):
            return 200, Streamed((chunk(body["model"], "The answer is 42"), chunk(body["model"], finish="stop")))
        return 200, completion(body["model"], "The answer is", "abort", completion_tokens=8)

    server = ReplyServer(reply)
    try:
        pool_config = PoolConfig(
            providers=[ProviderSpec(id="sim", base_url=server.base_url, max_retries=3, backoff_base_s=0.01,
                                    backoff_max_s=0.02)],
            workers=[WorkerSpec(id="w", description="d", provider="sim", price_in_per_m=1e3, price_out_per_m=1e3)])
        pool = RayPool(pool_config)
        try:
            with pytest.raises(WorkerCallError) as info:
                asyncio.run(pool.chat("w", [{"role": "user", "content": "q"}], max_billable_attempts=1))
            assert server.requests == 1 and info.value.failed_attempts_usd == pytest.approx((5 + 8) * 1e-3)
            pieces = []
            streamed = asyncio.run(pool.chat("w", [{"role": "user", "content": "q"}], on_delta=pieces.append,
                                            max_billable_attempts=1))
            assert streamed.text == "The answer is 42" == "".join(pieces) and server.requests == 2
        finally:
            stop_pool_actor()
    finally:
        server.close()
