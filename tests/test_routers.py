"""The trained routers: RouterDC-style contrastive training finds each cluster's best worker, the
Gymnasium environment pays what the routing table says, MASRouter-style learns a cascade on the pool,
and the RLlib PPO router, trained on the toy pool's train split, beats the random router on held-out
questions through `python -m cluster.evaluate` (a real local Ray)."""

import asyncio
import json
import subprocess
import sys

import numpy as np
import pytest

from conductor.config import SimulatorConfig
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.registry import build_methods
from conductor.evaluation.router_dc import train_router_dc
from conductor.evaluation.routing_env import RoutingEnv
from conductor.evaluation.routing_table import RoutingTable
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset, simulated_pool_config
from tests.support.direct_pool import DirectPool


def clustered_table(rng, centres, per_cluster=80, workers=4, dims=24):
    """Two clusters of questions; worker 1 is right on 90% of the first, worker 3 on 90% of the second,
    every other worker on 30%."""
    points = np.concatenate([centres[c] + rng.normal(0, 0.3, (per_cluster, dims)) for c in (0, 1)])
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    accuracy = np.full((2 * per_cluster, workers), 0.3)
    accuracy[:per_cluster, 1] = accuracy[per_cluster:, 3] = 0.9
    correct = (rng.random(accuracy.shape) < accuracy).astype(float)
    ids = tuple(f"q{i}" for i in range(len(points)))
    return RoutingTable(ids, points.astype(np.float32), correct, np.full(correct.shape, 0.01))


def test_router_dc_learns_each_clusters_best_worker():
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 1, (2, 24))
    router = train_router_dc(clustered_table(rng, centres), seed=0)
    unseen = clustered_table(rng, centres)  # new questions of the same two kinds
    choices = np.argmax(router(unseen.embeddings), axis=1)
    assert (choices[:80] == 1).mean() > 0.85 and (choices[80:] == 3).mean() > 0.85


def test_the_routing_env_pays_the_recorded_verdict_and_skips_failed_questions():
    correct = np.array([[1.0, 0.0], [np.nan, 1.0], [0.0, 1.0]])
    env = RoutingEnv({"embeddings": np.eye(3, 4), "correct": correct, "usd": np.full((3, 2), 0.5),
                      "cost_weight": 0.1})
    assert env.action_space.n == 2 and env.observation_space.shape == (4,)
    seen = set()
    for seed in range(30):
        obs, _ = env.reset(seed=seed)
        row = int(np.argmax(obs))
        seen.add(row)
        _, reward, terminated, truncated, _ = env.step(1)
        assert terminated and not truncated
        assert reward == pytest.approx(correct[row, 1] - 0.1)  # cost: 0.1 x one average call
    assert seen == {0, 2}


@pytest.mark.slow
def test_masrouter_trains_on_the_pool_and_routes_by_its_cascade(shared_data):
    config = SimulatorConfig(preset="toy", toy_items_per_domain=40)
    preset = load_preset(config)
    roster = Roster.full(simulated_pool_config(preset, "http://127.0.0.1:9/v1").workers)
    pool = DirectPool(Oracle(preset, config))
    tasks = list(preset.tasks)
    context = MethodContext(roster, WorkflowExecutor(pool), seed=0, train_tasks=tuple(tasks[:90]))
    [router] = build_methods(["masrouter"], context)
    rows = asyncio.run(Harness(concurrency=32).run([router], tasks[90:]))
    assert len(router.rewards) >= 3 * (90 // 32) and all(1 <= r.worker_calls <= 3 for r in rows)
    assert pool.calls > 3 * 90  # trained with the pool's real answers, every epoch
    with pytest.raises(ValueError, match="learn on the train split"):
        build_methods(["masrouter"], MethodContext(roster, WorkflowExecutor(pool)))


@pytest.mark.slow
def test_the_rllib_router_beats_the_random_router_on_toy(tmp_path):
    argv = ["--config", "configs/train-toy.yaml", "--set", f"output.dir={tmp_path}", "--set", "run_name=r",
            "--set", "simulator.latency_scale=0", "--set", "evaluate.split=heldout",
            "--set", "evaluate.methods=[random,rllib_router,router_dc]", "--set", "evaluate.repeats=2",
            "--set", "simulator.toy_items_per_domain=60", "--set", "train.val_questions=20",
            "--set", "train.heldout_questions=60", "--set", "evaluate.rllib_iterations=6"]
    done = subprocess.run([sys.executable, "-m", "cluster.evaluate", *argv], capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads((tmp_path / "r" / "report.json").read_text())["methods"]
    random_router, rllib = report["random"]["average"], report["rllib_router"]["average"]
    assert rllib["accuracy"] > random_router["accuracy"] + 0.2, (rllib, random_router)
    assert report["router_dc"]["average"]["accuracy"] > random_router["accuracy"] + 0.2
    assert rllib["worker_calls"] == 1 and rllib["n"] == 60
