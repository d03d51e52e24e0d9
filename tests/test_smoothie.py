"""Smoothie's label-free estimate: on synthetic embeddings with known noise it picks the least noisy
worker overall (independent) and per neighbourhood (dependent); end to end it makes every worker's call
and returns one of their answers."""

import asyncio

import numpy as np
import pytest

from conductor.config import SimulatorConfig
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.registry import build_methods
from conductor.evaluation.smoothie import choose_workers, distances_from_truth
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset, simulated_pool_config
from tests.support.direct_pool import DirectPool


def noisy_outputs(rng, truths, scales):
    """questions x workers x dims: each worker's output is the truth plus noise of its own scale."""
    return np.stack([truths + rng.normal(0, s, truths.shape) for s in scales], axis=1)


def test_the_estimate_recovers_each_workers_noise():
    rng = np.random.default_rng(0)
    scales = [0.3, 0.1, 0.5, 0.2]
    outputs = noisy_outputs(rng, rng.normal(0, 1, (400, 32)), scales)
    estimates = distances_from_truth(outputs)
    assert np.allclose(estimates, [32 * s ** 2 for s in scales], rtol=0.15)
    assert set(choose_workers(outputs, np.eye(400, 8), dependent=False)) == {1}


def test_the_dependent_variant_chooses_per_neighbourhood():
    rng = np.random.default_rng(1)
    truths = rng.normal(0, 1, (200, 16))
    first = noisy_outputs(rng, truths[:100], [0.1, 0.6, 0.6])   # worker 0 best on the first kind of question
    second = noisy_outputs(rng, truths[100:], [0.6, 0.6, 0.1])  # worker 2 best on the second
    questions = np.zeros((200, 2))
    questions[:100, 0] = questions[100:, 1] = 1.0
    chosen = choose_workers(np.concatenate([first, second]), questions, dependent=True, neighbours=20)
    assert (chosen[:100] == 0).mean() > 0.9 and (chosen[100:] == 2).mean() > 0.9
    assert len(set(choose_workers(np.concatenate([first, second]), questions, dependent=False))) == 1


@pytest.mark.slow
def test_smoothie_calls_every_worker_and_returns_one_of_their_answers(shared_data):
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=30)
    preset = load_preset(config)
    roster = Roster.full(simulated_pool_config(preset, "http://127.0.0.1:9/v1").workers)
    context = MethodContext(roster, WorkflowExecutor(DirectPool(Oracle(preset, config))), seed=0)
    tasks = [t for t in preset.tasks if t.domain != "code"][::20][:24]
    methods = build_methods(["smoothie_dependent", "smoothie_independent"], context)
    rows = asyncio.run(Harness(concurrency=16).run(methods, tasks))
    assert len(rows) == 2 * len(tasks)
    assert all(r.worker_calls == 7 and r.correct is not None and r.latency_s > 0 for r in rows)
    for method in methods:
        for key, attempt in method._attempts.items():
            assert attempt.answer == attempt.steps[method.chosen[key]].response
        assert len(set(method.chosen.values())) == 1 or method.dependent  # independent: one worker for all
