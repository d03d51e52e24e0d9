"""WorkerPool actors on a real local Ray cluster: one budget per provider across processes."""

import asyncio

import pytest
import ray

from conductor.config import SimulatorConfig
from conductor.pool import WorkerCallError
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from tests.support.sim_helpers import ask

pytestmark = pytest.mark.slow
RPM, WINDOW_S, CALLS_PER_PROCESS = 10, 2.0, 12


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

    async def run(self, messages_list):
        async def one(messages):
            try:
                return (await self.pool.chat("toy-arith", messages)).text
            except WorkerCallError as exc:
                return exc.kind

        return await asyncio.gather(*(one(m) for m in messages_list))


def max_in_window(times, window):
    times = sorted(times)
    return max(sum(1 for s in times if t - window < s <= t) for t in times)


def two_processes(sim, shared):
    pool_config = simulated_pool_config(sim.state.preset, sim.base_url, rpm=RPM, rate_window_s=WINDOW_S,
                                        deadline_s=120)
    tasks = list(sim.state.preset.tasks)
    processes = [RolloutProcess.remote(pool_config, shared) for _ in range(2)]
    batches = [[ask(t) for t in tasks[i * CALLS_PER_PROCESS:(i + 1) * CALLS_PER_PROCESS]] for i in range(2)]
    results = ray.get([p.run.remote(b) for p, b in zip(processes, batches)])
    for process in processes:
        ray.kill(process)
    return [text for batch in results for text in batch]


def test_two_processes_sharing_a_provider_never_exceed_its_rpm(ray_local):
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
    with SimulatorServer(config) as sim:
        texts = two_processes(sim, shared=True)
        arrivals = [e["t"] for e in sim.state.log if e["status"] == 200]
    assert len(texts) == 2 * CALLS_PER_PROCESS and all(t.startswith(("####", "Working", "Answer")) for t in texts)
    assert len(arrivals) == 2 * CALLS_PER_PROCESS
    assert max_in_window(arrivals, WINDOW_S) <= RPM


def test_without_the_shared_actor_the_same_load_exceeds_the_rpm(ray_local):
    """Negative control: per-process budgets add up, which is why pools are actors."""
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
    with SimulatorServer(config) as sim:
        two_processes(sim, shared=False)
        arrivals = [e["t"] for e in sim.state.log if e["status"] == 200]
    assert max_in_window(arrivals, WINDOW_S) > RPM


def test_a_killed_pool_actor_is_an_infra_error_not_a_hang(ray_local):
    from actors.worker_pool import RayPool, actor_name

    config = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=20)
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url)
        pool = RayPool(pool_config)
        task = sim.state.preset.tasks[0]
        first = asyncio.run(pool.chat("toy-arith", ask(task)))
        assert first.completion_tokens > 0
        assert ray.get(pool.actors["sim"].stats.remote())["calls"] == 1
        ray.kill(ray.get_actor(actor_name("sim")), no_restart=True)
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
