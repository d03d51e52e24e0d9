"""Streamed worker calls against the real simulator over HTTP (official client): the same reply and usage
as unstreamed, in pieces; a fault before the first piece is retried, a stream broken after it is final;
and the Ray pool actor streams the same pieces through a Ray streaming generator."""

import asyncio

import pytest
import ray

from conductor.config import FaultRates, SimulatorConfig
from conductor.local_pool import LocalPool
from conductor.pool import WorkerCallError
from conductor.simulator.presets import simulated_pool_config
from conductor.simulator.server import SimulatorServer
from tests.support.sim_helpers import ask


def paper7_sim(shared_data, **overrides):
    return SimulatorServer(SimulatorConfig(preset="paper-7", port=0, latency_scale=0.01, data_dir=str(shared_data),
                                           mmlu_items=50, **overrides))


def call(pool, worker, messages, stream: bool):
    pieces = []

    async def main():
        try:
            return await pool.chat(worker, messages, {"seed": 7}, on_delta=pieces.append if stream else None)
        except WorkerCallError as exc:
            return exc
        finally:
            await pool.close()

    return asyncio.run(main()), pieces


def test_a_streamed_reply_is_the_unstreamed_reply_in_pieces(shared_data):
    with paper7_sim(shared_data) as sim:
        task = sim.state.preset.tasks[0]
        config = simulated_pool_config(sim.state.preset, sim.base_url)
        plain, _ = call(LocalPool(config), "gpt-5", ask(task), stream=False)
        streamed, pieces = call(LocalPool(config), "gpt-5", ask(task), stream=True)
        log = list(sim.state.log)
    assert len(pieces) > 3 and "".join(pieces) == streamed.text == plain.text
    assert (streamed.prompt_tokens, streamed.completion_tokens) == (plain.prompt_tokens, plain.completion_tokens)
    assert streamed.cost_usd == pytest.approx(plain.cost_usd) and streamed.cost_usd > 0
    assert [entry["outcome"] for entry in log] == ["ok", "ok"]


def test_a_fault_before_the_first_piece_is_retried_and_a_broken_stream_is_final(shared_data):
    with paper7_sim(shared_data, faults=FaultRates(server_error=1.0)) as sim:
        config = simulated_pool_config(sim.state.preset, sim.base_url, max_retries=2, backoff_base_s=0.01)
        failed, pieces = call(LocalPool(config), "gpt-5", ask(sim.state.preset.tasks[0]), stream=True)
    assert isinstance(failed, WorkerCallError) and failed.kind == "server_error" and failed.retries == 2
    assert pieces == []
    with paper7_sim(shared_data, faults=FaultRates(disconnect=1.0)) as sim:
        config = simulated_pool_config(sim.state.preset, sim.base_url, max_retries=2, backoff_base_s=0.01)
        pool = LocalPool(config)
        broken, pieces = call(pool, "gpt-5", ask(sim.state.preset.tasks[0]), stream=True)
        attempts = len(sim.state.log)
    assert isinstance(broken, WorkerCallError) and broken.kind == "stream_broken", broken
    assert pieces and attempts == 1  # text was passed on, so the call was not tried again
    assert pool.stats()["sim"]["cost_usd"] > 0  # what it sent was billed; no usage chunk came to say so


@pytest.mark.slow
def test_the_ray_pool_actor_streams_the_same_pieces(ray_local, shared_data):
    from actors.worker_pool import RayPool

    with paper7_sim(shared_data) as sim:
        task = sim.state.preset.tasks[1]
        config = simulated_pool_config(sim.state.preset, sim.base_url)
        direct, direct_pieces = call(LocalPool(config), "claude-sonnet-4", ask(task), stream=True)
        pool = RayPool(config, run_name="streaming-test")
        pieces = []
        through_ray = asyncio.run(pool.chat("claude-sonnet-4", ask(task), {"seed": 7}, on_delta=pieces.append))
        for actor in pool.actors.values():
            ray.kill(actor)
    assert len(pieces) > 3 and pieces == direct_pieces and through_ray.text == direct.text

