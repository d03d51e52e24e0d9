"""`cluster.train` in asynchronous mode, end to end in a subprocess (real vLLM, Ray, DeepSpeed, simulator):
the staleness bound on every trained record and nothing admitted past the last step, a spend cap that stops a
resumed run before it, a raised one that lets it go on until SIGTERM stops it and a resume that trains what it
had admitted, and a run that heals itself while a chaos monkey kills a rollout actor, an engine
and a learner rank under 20% injected worker faults; with ``train.replayable``, a second run that trains as the
first did."""

import collections
import json
import re
import shutil
import signal
from pathlib import Path

import pytest

from conductor.replay_store import ReplayStore
from conductor.spend_cap import HEADROOM
from tests.support.toy_warm_start import TOY_WARM_START
from tests.support.train_cli import run_train, start_train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
GROUP = 4
SMALL = [*TOY_WARM_START, "train.questions_per_step=3", f"rollout.group_size={GROUP}", "learner.micro_batch_size=4",
         "train.format_floor=0", "train.refill_rounds=0", "train.plot=false", "train.max_staleness=1",
         "simulator.latency_scale=0.2"]
HEAL_STEPS = 15  # the third kill (a learner rank, after step 12) is healed from the step-12 checkpoint


def train(cwd, *overrides, timeout=900, warm=None):
    if warm is not None:
        name = next(o.split("=", 1)[1] for o in overrides if o.startswith("run_name="))
        shutil.copytree(warm, Path(cwd) / "runs" / name / "sft")
    return run_train(cwd, REPO / "configs/train-toy.yaml", SMALL + list(overrides), timeout=timeout)


def trained_groups(run: Path) -> list[dict]:
    lines = (run / "trained_groups.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def check_exactly_once(run: Path, steps: list[dict]) -> None:
    """Every trained group is whole (its G rollout ids), no rollout id is trained twice, and each trained
    id is in the replay store exactly once."""
    trained = [rid for step in steps for group in step["groups"].values() for rid in group["rollout_ids"]]
    assert len(trained) == len(set(trained)), "a rollout was trained twice"
    for step in steps:
        for group_id, group in step["groups"].items():
            assert group["rollout_ids"] == [f"{group_id}-s{s}" for s in range(GROUP)], group_id
    stored = collections.Counter(ReplayStore(str(run / "rollouts")).dataset().to_table(
        columns=["rollout_id"]).column("rollout_id").to_pylist())
    assert all(stored[rid] == 1 for rid in trained), "a trained rollout is missing from, or doubled in, the store"


@pytest.mark.timeout(2400)  # five driver runs: refused, 5 steps, resumed under a cap, stopped by SIGTERM, completed
def test_async_k1_trains_nothing_more_than_one_version_old(tmp_path, toy_warm_start):
    # first under a cap that the held-out baselines' estimate passes: stopped before them, before the cluster
    refused = train(tmp_path, "run_name=async", "train.steps=5", "budget.max_usd=0.000001", warm=toy_warm_start)
    assert refused.returncode == 5, refused.stdout[-2000:] + refused.stderr[-3000:]
    assert "budget: stopped before the held-out baselines" in refused.stdout
    assert "Nothing more was spent" in refused.stdout
    run = tmp_path / "runs" / "async"
    assert not (run / "baselines.json").exists() and not (run / "summary.json").exists()
    done = train(tmp_path, "run_name=async", "train.steps=5", "train.eval_every=5", "learner.checkpoint_every=5")
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 5 and summary["max_staleness"] == 1
    pool = summary["training_pool"]["sim"]  # the pool actor's counters over the training spans
    assert pool["seconds"] > 0 and pool["attempts"] >= 0 and 0 <= pool["busy"] <= 1 and pool["rpm_ratio"] is None
    steps = trained_groups(run)
    assert [step["step"] for step in steps] == [1, 2, 3, 4, 5]
    lags = [step["learner_version"] - group["version"] for step in steps for group in step["groups"].values()]
    assert all(0 <= lag <= 1 for lag in lags), lags  # the bound, on every trained record's group
    assert 1 in lags  # and the mode is really asynchronous: the second step trains on groups sampled at v1
    assert all(len(step["groups"]) == 3 for step in steps)
    check_exactly_once(run, steps)
    logged = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("step ")]
    assert logged == ["1", "2", "3", "4", "5"]
    resume_under_a_spend_cap(tmp_path, run, done.stdout)


def resume_under_a_spend_cap(tmp_path: Path, run: Path, log: str) -> None:
    """The 5-step run, metered and forecast, resumed to 6 steps under a cap that its closing held-out
    evaluation fits but the next step does not, as the stop rule projects it (conductor/spend_cap.py) from the
    figures the checkpoint and the ledger carry: it stops before step 6, keeps its checkpoint, evaluates and
    ends within the cap; resumed again with a raised cap it goes on until a signal stops it (below). The
    figures are the run's own: the same baselines and held-out evaluation of the same policy cost what they
    cost the first time."""
    uncapped = json.loads((run / "summary.json").read_text())
    state = json.loads((run / "checkpoints" / "step-5" / "trainer_state.json").read_text())
    phases = uncapped["segment_spend_usd"]
    assert uncapped["stopped"] is None and uncapped["budget_usd"] is None
    assert uncapped["spent_usd"] == pytest.approx(sum(phases.values()))
    assert phases["baselines"] > 0 and phases["training_steps"] > 0, phases
    assert [forecast["step"] for forecast in uncapped["cost_forecasts"]] == [2, 3, 4, 5]  # from the second step
    assert f"spent ${state['history'][-1]['spent_usd']:.4f}" in log and "forecast $" in log
    assert state["pending"]["groups"] == []  # its steps all trained: nothing was admitted past the last

    # before step 6: spent S (the first run's: a resumed segment reads the baselines the run kept, at no cost),
    # the next step at (1 + 0) x the largest step (the last: no later step's groups are admitted beside it) and
    # its validation, the held-out evaluation at the last validation's cost (6 questions, 6 held-out)
    spent = uncapped["spent_usd"]
    projected = HEADROOM * (max(row["step_cost_usd"] for row in state["history"])  # the last: none beside it
                            + state["evals"][-1]["val_cost_usd"])
    assert phases["closing"] < projected  # the held-out evaluation (and calls in flight) within its reserve
    cap = spent + (phases["closing"] + projected) / 2
    stopped = train(tmp_path, "run_name=async", "train.steps=6", "train.resume=true", f"budget.max_usd={cap}")
    assert stopped.returncode == 0, stopped.stdout[-2000:] + stopped.stderr[-3000:]
    assert "resumed from step-5" in stopped.stdout
    assert "held-out baselines (kept from the run before: nothing spent)" in stopped.stdout
    assert stopped.stdout.count("budget: stopped before step 6: the run has spent $") == 1
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stopped"] == "budget" and summary["stopped_before_step"] == 6 and summary["steps"] == 5
    assert uncapped["spent_usd"] < summary["spent_usd"] <= cap  # carried over, and within the cap
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["tag"] == "step-5"
    assert isinstance(summary["heldout_accuracy"], float)

    a_signal_stops_it_and_the_resume_trains_what_it_had_admitted(tmp_path, run, uncapped, summary, 10 * cap)


def a_signal_stops_it_and_the_resume_trains_what_it_had_admitted(tmp_path: Path, run: Path, uncapped: dict,
                                                                 capped: dict, cap: float) -> None:
    """Resumed with a raised cap for 12 steps, SIGTERM once step 8 is logged (as ``ray job stop`` or a pod's
    termination sends it): the run finishes the step it is on, checkpoints it with the groups admitted for the
    next, lets them come back and exits 143, with no summary of its own. Resumed again, it trains those groups as
    they were sampled, not drawn again, and completes: the spend carried over every segment, every group trained
    exactly once."""
    overrides = ["run_name=async", "train.steps=12", "train.resume=true", f"budget.max_usd={cap}"]
    driver = start_train(tmp_path, REPO / "configs/train-toy.yaml", [*SMALL, *overrides],
                         stderr=tmp_path / "signalled.err")
    log = []
    try:
        for line in driver.stdout:
            log.append(line)
            if line.startswith("step ") and int(line.split()[1]) >= 8:
                driver.send_signal(signal.SIGTERM)
                break
        log.append(driver.stdout.read())  # to its end (what the line iterator had buffered included)
        driver.wait(timeout=900)
    finally:
        driver.kill()
        driver.stdout.close()
    log = "".join(log)
    assert driver.returncode == 128 + signal.SIGTERM, log[-2000:] + (tmp_path / "signalled.err").read_text()[-3000:]
    stopped_at = int(re.search(r"SIGTERM: stopping after step (\d+)", log)[1])
    assert 8 <= stopped_at < 12 and "resumed from step-5" in log
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["tag"] == f"step-{stopped_at}"
    assert json.loads((run / "summary.json").read_text()) == capped  # a stopped segment writes none
    state = json.loads((run / "checkpoints" / f"step-{stopped_at}" / "trainer_state.json").read_text())
    pending = [group_id for group_id, _, _ in state["pending"]["groups"]]
    assert pending, "no group was admitted for the step after the signal's"  # k = 1: the next step's
    assert "admitted for later steps had not come back" not in log
    ledger = json.loads((run / "spend.json").read_text())["spent_usd"]  # its calls, those let come back included

    completed = train(tmp_path, *overrides)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    assert f"resumed from step-{stopped_at}" in completed.stdout and "stopping after" not in completed.stdout
    assert f"{len(pending)} group(s) the checkpoint had admitted ahead are in the store" in completed.stdout
    final = json.loads((run / "summary.json").read_text())
    assert final["stopped"] is None and final["steps"] == 12
    assert final["faults"]["groups_carried_over"] == len(pending)
    assert capped["segment_spend_usd"]["baselines"] == final["segment_spend_usd"]["baselines"] == 0
    assert final["single_worker_accuracy"] == uncapped["single_worker_accuracy"]  # read, not measured again
    assert final["spent_usd"] == pytest.approx(ledger + sum(final["segment_spend_usd"].values()))
    assert ledger > capped["spent_usd"]
    steps = trained_groups(run)
    assert [step["step"] for step in steps] == list(range(1, 13))
    check_exactly_once(run, steps)
    # the step after the signal's trains the groups admitted for it as they were sampled (their rollout ids), by
    # the checkpoint's weights at most
    assert set(pending) <= set(steps[stopped_at]["groups"])
    sampled = ReplayStore(str(run / "rollouts")).dataset().to_table(columns=["group_id", "policy_version"])
    versions = dict(zip(sampled.column("group_id").to_pylist(), sampled.column("policy_version").to_pylist()))
    assert all(versions[group_id] <= state["pending"]["version"] for group_id in pending)


@pytest.mark.timeout(1500)  # its driver's own limit: ~80 s alone here, 265 s beside another run, >600 s in a loaded CI
def test_a_run_heals_after_a_rollout_actor_an_engine_and_a_learner_rank_die(tmp_path, toy_warm_start):
    faults = ["simulator.faults.rate_limit=0.04", "simulator.faults.server_error=0.04", "simulator.faults.timeout=0.04",
              "simulator.faults.disconnect=0.04", "simulator.faults.malformed=0.04", "simulator.faults.hang_s=3",
              "simulator.retry_after_s=0.2"]
    chaos = ["chaos.kill=[engine, rollout_actor, learner]", "chaos.every_steps=4"]  # kills after steps 4, 8, 12
    done = train(tmp_path, "run_name=chaos", f"train.steps={HEAL_STEPS}", "train.eval_every=6",
                 "learner.checkpoint_every=2", "train.max_learner_restarts=2", *faults, *chaos, timeout=1500,
                 warm=toy_warm_start)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = tmp_path / "runs" / "chaos"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == HEAL_STEPS
    assert [kill.split()[0] for kill in summary["chaos_kills"]] == ["engine", "rollout_actor", "learner"]
    counted = summary["faults"]
    assert counted.get("learner_restarts") == 1
    assert counted.get("engine_restarts", 0) >= 1 and counted.get("rollout_actor_restarts", 0) >= 1
    assert counted.get("rollout_requests_reissued", 0) >= 1
    assert counted.get("pool_restarts", 0) == 0  # the pool actors are the driver's: a rollout actor's death spares them
    assert summary["engine_versions"] == [summary["policy_version"]]  # the restarted engine has the current weights
    calls = [call for row in ReplayStore(str(run / "rollouts")).dataset().to_table(columns=["steps"]).to_pylist()
             for call in row["steps"]]
    assert calls and any(call["retries"] for call in calls)  # workflows ran, and injected faults were retried
    steps = trained_groups(run)
    assert [step["step"] for step in steps] == list(range(1, HEAL_STEPS + 1))
    check_exactly_once(run, steps)
    lags = [step["learner_version"] - group["version"] for step in steps for group in step["groups"].values()]
    assert all(0 <= lag <= 1 for lag in lags), lags


@pytest.mark.timeout(1500)  # two runs of the driver
def test_a_replayable_async_run_trains_as_its_rerun_did(tmp_path, toy_warm_start):
    """``train.replayable`` at k = 1: two runs with the same seed train every step on the same groups, sampled at
    the same versions into the same completions, scored the same, however their requests finished (each run's
    ids start with its own segment). Each step's three questions go out as three requests, which the rollout
    actor runs at once, so they can come back in any order (two actors do not fit the toy's 2 CPUs beside the
    engine and the learner)."""
    runs = []
    for name in ("replay-a", "replay-b"):
        done = train(tmp_path, f"run_name={name}", "train.steps=5", "train.eval_every=5", "train.replayable=true",
                     "rollout.questions_per_batch=1", warm=toy_warm_start)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        runs.append(tmp_path / "runs" / name)

    def unsegmented(rollout_id: str) -> str:
        return rollout_id.partition("-")[2]

    def trained(run: Path) -> list[list[tuple]]:
        return [sorted((unsegmented(gid), group["version"], tuple(map(unsegmented, group["rollout_ids"])))
                       for gid, group in step["groups"].items()) for step in trained_groups(run)]

    def sampled(run: Path) -> dict[str, tuple]:
        """The trained rollouts as the store has them (one still in flight when the run ended is not compared)."""
        ids = {rid for step in trained_groups(run) for group in step["groups"].values() for rid in group["rollout_ids"]}
        rows = ReplayStore(str(run / "rollouts")).dataset().to_table(
            columns=["rollout_id", "policy_version", "completion_text", "reward"]).to_pylist()
        return {unsegmented(r["rollout_id"]): (r["policy_version"], r["completion_text"], r["reward"])
                for r in rows if r["rollout_id"] in ids}

    first, second = runs
    assert trained(first) == trained(second) and len(trained(first)) == 5
    assert {lag for step in trained_groups(first) for lag in
            (step["learner_version"] - g["version"] for g in step["groups"].values())} == {0, 1}
    assert sampled(first) == sampled(second)
    summaries = [json.loads((run / "summary.json").read_text()) for run in runs]
    assert all(s["replayable"] and "unsettled_publishes" not in s["faults"] for s in summaries)
    assert summaries[0]["heldout_accuracy"] == summaries[1]["heldout_accuracy"]
