"""Calibrating a twin (cluster/calibrate.py): the simulated paper-7 pool measured over loopback HTTP through
the real pool and reward gives back what its simulator really does, and the twin it writes loads and
serves; a user's own tasks and simulated pool make a twin that lists those tasks; infrastructure errors are
counted and out of the accuracy; a bad setting fails naming it.

What the paper-7 workers "really" score: the oracle (conductor/simulator/oracle.py) solves exactly
``round(accuracy x n)`` of a domain's n known items for each worker, the ones of lowest difficulty plus that
worker's noise, so its realised accuracy on the whole domain is the preset's figure to within 0.5 / n. The
calibration draws 30 of those items per domain; the test checks its figures against that realised accuracy
within 3.5 binomial s.e., and item by item against the oracle's own answers on the items drawn.
"""

import asyncio
import json
import math
import random
import statistics

import pytest
import yaml
from openai import OpenAI

from cluster.calibrate import main as calibrate_main
from conductor.calibration import Call, draw_questions, fit_worker, fit_workers, lognormal_fit, measure
from conductor.config import FaultRates, SimulatorConfig
from conductor.episode_score import EpisodeScorer, Status
from conductor.executor import WorkflowExecutor
from conductor.local_pool import LocalPool
from conductor.simulator.oracle import Oracle
from conductor.simulator.preset_file import read_preset_file
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.simulator.server import SimulatorServer, SimulatorState
from conductor.twin_preset import UnmeasuredDomain, twin_workers

PER_DOMAIN = 30  # seed 0 draws the worst of the 21 (worker, domain) figures 2.1 s.e. from the truth; over
# seeds 0-199, 1% of draws would put one beyond 3.5 s.e., none beyond 4 (the test is deterministic)
BOUND_SE = 3.5


def realised(oracle: Oracle, worker: str, task_ids) -> float:
    """The share of ``task_ids`` the oracle has ``worker`` solve alone."""
    return statistics.fmean(oracle.base_correct[(worker, t)] for t in task_ids)


@pytest.fixture(scope="module")
def paper7_twin(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("calibrate")
    argv = ["--config", "configs/sim-paper7.yaml", "--set", f"output.dir={out}", "--set", "run_name=twin7",
            "--set", f"simulator.data_dir={shared_data}", "--set", "simulator.latency_scale=0",
            "--set", f"calibrate.questions_per_domain={PER_DOMAIN}", "--set", "calibrate.base_preset=paper-7"]
    assert calibrate_main(argv) == 0
    report = json.loads((out / "twin7" / "calibration.json").read_text())
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=600)
    preset = load_preset(config)
    return out / "twin7", report, preset, Oracle(preset, config)


def test_calibrating_paper7_gives_back_what_its_simulator_does(paper7_twin):
    run, report, preset, oracle = paper7_twin
    assert report["infra_errors"] == 0 and report["calls"] == 7 * 3 * PER_DOMAIN
    for worker in read_preset_file("paper-7").workers:
        measured = report["workers"][worker.name]["accuracy"]
        assert set(measured) == {"math500", "mmlu", "code"}
        for domain, stated in worker.fractions().items():
            items = [t.id for t in preset.tasks if t.domain == domain]
            truth = realised(oracle, worker.name, items)
            assert abs(truth - stated) <= 0.5 / len(items) + 1e-9  # the preset's figure, as realised
            cell, drawn = measured[domain], report["questions"][domain]
            assert cell["scored"] == len(drawn) == PER_DOMAIN
            assert cell["correct"] == sum(oracle.base_correct[(worker.name, t)] for t in drawn)  # item by item
            se = math.sqrt(truth * (1 - truth) / PER_DOMAIN)
            assert abs(cell["accuracy"] - truth) <= BOUND_SE * se, (worker.name, domain, cell, truth)


def test_the_paper7_twin_reproduces_tokens_and_prices_and_loads_and_serves(paper7_twin, shared_data):
    run, report, _, _ = paper7_twin
    twin_path = run / "twin.yaml"
    header = " ".join(line[2:] for line in twin_path.read_text().splitlines() if line.startswith("# "))
    assert header.startswith("A twin of the pool gemini-2.5-pro") and "calibrate.questions_per_domain=30" in header
    assert "error_correlation is kept from preset paper-7" in header and "behaviour knobs" in header
    twin = read_preset_file(str(twin_path))
    assert twin.error_correlation == {"mmlu": 0.75}  # paper-7's, in the calibrated domains only
    assert twin.tasks == read_preset_file("paper-7").tasks and twin.unseen is None  # its entries, placeholders kept
    for original, copy in zip(read_preset_file("paper-7").workers, twin.workers):
        assert copy.name == original.name and copy.description == original.description
        assert (copy.price_in_per_m, copy.price_out_per_m) == (original.price_in_per_m, original.price_out_per_m)
        measured = report["workers"][copy.name]["accuracy"]
        assert copy.accuracy == {domain: round(cell["accuracy"], 4) for domain, cell in measured.items()}
        assert abs(copy.answer_tokens - original.answer_tokens) <= 0.1 * original.answer_tokens + 10
        assert abs(copy.reasoning_tokens - original.reasoning_tokens) <= 0.1 * original.reasoning_tokens + 1
    config = SimulatorConfig(preset=str(twin_path), data_dir=str(shared_data), mmlu_items=600, port=0,
                             latency_scale=0)
    loaded = load_preset(config)
    twin_oracle = Oracle(loaded, config)
    for worker in loaded.workers:  # the twin's simulator realises the measured rates on the whole domain
        for domain, accuracy in worker.accuracy.items():
            items = [t.id for t in loaded.tasks if t.domain == domain]
            assert abs(realised(twin_oracle, worker.name, items) - accuracy) <= 0.5 / len(items) + 1e-4
    with SimulatorServer(config) as sim:
        client = OpenAI(base_url=sim.base_url, api_key="none")
        question = loaded.tasks[0].prompt
        reply = client.chat.completions.create(model="gpt-5", messages=[{"role": "user", "content": question}])
        assert "could not identify" not in reply.choices[0].message.content
        assert reply.usage.completion_tokens_details.reasoning_tokens > 0  # gpt-5's hidden reasoning, measured


def test_a_twin_of_your_own_tasks_lists_them(tmp_path, capsys):
    """A user's JSONL and a simulated pool of their own over it: the twin names the same dataset entry."""
    rows = [{"q": f"What is {a} plus {b}? End the response with '#### N', where N is the final number.",
             "a": str(a + b), "kind": "sums" if a % 2 else "evens"} for a, b in zip(range(40), range(40, 80))]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    entry = {"path": str(tmp_path / "mine.jsonl"), "fields": {"question": "q", "answer": "a", "domain": "kind"},
             "verifier": "number", "instruction": ""}
    pool = {"name": "mine", "tasks": {"datasets": [entry]}, "workers": [
        {"name": "fast", "description": "a fast model", "accuracy": {"sums": 0.5, "evens": 0.25},
         "price_in_per_m": 0.1, "price_out_per_m": 0.4},
        {"name": "slow", "description": "a careful model", "accuracy": {"sums": 0.9, "evens": 0.8},
         "answer_tokens": 50, "reasoning_tokens": 100}]}
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(pool))
    argv = ["--set", f"output.dir={tmp_path}", "--set", "run_name=own",
            "--set", f"simulator.preset={tmp_path}/pool.yaml", "--set", "simulator.latency_scale=0",
            "--set", "calibrate.questions_per_domain=20", "--set", f"data.datasets=[{json.dumps(entry)}]"]
    assert calibrate_main(argv) == 0
    assert "twin preset:" in capsys.readouterr().out
    twin = read_preset_file(str(tmp_path / "own" / "twin.yaml"))
    assert twin.tasks.datasets == [entry]
    assert twin.error_correlation == {}  # no base preset: the schema's 0.5
    report = json.loads((tmp_path / "own" / "calibration.json").read_text())
    assert {d: len(ids) for d, ids in report["questions"].items()} == {"evens": 20, "sums": 20}
    config = SimulatorConfig(preset=str(tmp_path / "pool.yaml"))
    oracle = Oracle(load_preset(config), config)
    for worker in twin.workers:
        assert worker.accuracy == {d: round(realised(oracle, worker.name, ids), 4)
                                   for d, ids in report["questions"].items()}
    fast, slow = twin.workers
    assert fast.reasoning_tokens == 0 and abs(slow.reasoning_tokens - 100) <= 10
    assert (fast.price_in_per_m, fast.price_out_per_m) == (0.1, 0.4)


def test_a_judged_pools_twin_has_a_judge_and_serves_its_tasks(tmp_path, capsys):
    """Judged tasks are graded through the pool's judge while calibrating, and their twin needs a judge too."""
    argv = ["--set", f"output.dir={tmp_path}", "--set", "run_name=judged", "--set", "simulator.preset=toy-judged",
            "--set", "simulator.latency_scale=0", "--set", "calibrate.questions_per_domain=10"]
    assert calibrate_main(argv) == 0
    report = json.loads((tmp_path / "judged" / "calibration.json").read_text())
    assert report["infra_errors"] == 0  # every answer graded: the judge was bound, its spend apart
    assert 0 < report["judge_calls"] <= report["calls"] and report["judge_cost_usd"] > 0
    twin_path = tmp_path / "judged" / "twin.yaml"
    twin = read_preset_file(str(twin_path))
    assert twin.judge is not None and twin.judge.name == read_preset_file("toy-judged").judge.name
    assert "its error rate is not measured" in " ".join(twin_path.read_text().split())
    preset = load_preset(SimulatorConfig(preset=str(twin_path)))
    assert preset.judge is not None and {t.verifier for t in preset.tasks} == {"judge"}


def test_infrastructure_errors_are_counted_and_out_of_the_accuracy(shared_data):
    config = SimulatorConfig(preset="paper-7", port=0, latency_scale=0, data_dir=str(shared_data), seed=3,
                             faults=FaultRates(server_error=0.3))
    with SimulatorServer(config) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url, max_retries=0)
        workers = pool_config.workers[:3]
        questions = [t for ts in draw_questions(sim.state.preset.tasks, 5, 0).values() for t in ts]

        async def calibrate() -> list[Call]:
            pool = LocalPool(pool_config)
            try:
                return await measure(WorkflowExecutor(pool), workers, questions, EpisodeScorer(), concurrency=8)
            finally:
                await pool.close()

        calls = asyncio.run(calibrate())
        oracle = sim.state.oracle
    failed = [c for c in calls if c.status is Status.INFRA_ERROR]
    assert failed and all(c.infra_error and not c.answered for c in failed) and len(failed) < len(calls)
    for fit in fit_workers(calls, [w.id for w in workers]):
        mine = [c for c in calls if c.worker == fit.worker]
        assert fit.answered == sum(c.answered for c in mine)
        for domain, cell in fit.domains.items():
            asked = [c for c in mine if c.domain == domain]
            scored = [c for c in asked if c.status is not Status.INFRA_ERROR]
            assert cell.scored + cell.infra_errors == len(asked) and cell.scored == len(scored)
            assert cell.correct == sum(oracle.base_correct[(fit.worker, c.task_id)] for c in scored)
    lost = fit_worker("w", [Call("w", "q1", "d", Status.INFRA_ERROR, answered=False, infra_error="500")])
    with pytest.raises(UnmeasuredDomain, match="worker w: no scored answer in d"):
        twin_workers([lost], [], bare_tokens=0.0)


def test_the_latency_fit_gives_back_the_simulators_parameters(shared_data):
    """The simulator draws a worker's latency log-normally around its latency_ms (the mean) with its sigma."""
    config = SimulatorConfig(preset="toy", seed=1, toy_items_per_domain=10)
    state = SimulatorState(config, load_preset(config))
    state.rng = random.Random(7)
    draws = [state.latency_s("toy-arith") for _ in range(20_000)]
    mean_ms, sigma = lognormal_fit(draws)
    assert abs(mean_ms - 40.0) <= 0.02 * 40.0 and abs(sigma - 0.4) <= 0.02


@pytest.mark.parametrize("override, message", [
    ("calibrate.questions_per_domain=0", "calibrate.questions_per_domain: Input should be greater than or equal to 1"),
    ("calibrate.base_preset=nowhere.yaml", "calibrate.base_preset: Value error, preset file nowhere.yaml not found"),
    ("calibrate.concurency=4", "calibrate.concurency: unknown key")])
def test_a_bad_setting_fails_naming_it(override, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        calibrate_main(["--set", f"output.dir={tmp_path}", "--set", override])
    assert stop.value.code == 2 and message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
