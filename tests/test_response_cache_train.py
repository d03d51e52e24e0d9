"""The response cache over a whole training run (`cluster.train` in a subprocess, the toy on the simulator):
a second run of the same seed (asynchronous, ``train.replayable``) is served from the cache that the first
filled, through the cluster's pool actors and the driver's baselines, and reaches the same figures; a
replay-only run with an empty cache stops at its first worker call, naming it. Ray-free cache tests:
tests/test_response_cache.py."""

import json
import shutil
from pathlib import Path

import pytest

from tests.support.toy_warm_start import TOY_WARM_START
from tests.support.train_cli import run_train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
TINY = [*TOY_WARM_START, "run_name=c", "train.questions_per_step=3", "rollout.group_size=4", "train.steps=2",
        "train.eval_every=2", "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0",
        "train.refill_rounds=0", "train.plot=false",
        "train.val_constrain_format=true",  # validation and held-out workflows parse: they call workers
        "train.max_staleness=1", "train.replayable=true"]  # async, as paper-7 ships, made to repeat (README)
SAME_FIGURES = ("heldout_accuracy", "heldout_format_rate", "best_val_accuracy", "best_single_accuracy",
                "random_router_accuracy", "steps")


def train(cwd, *overrides, warm=None):
    if warm is not None:  # the session's warm start (the driver reuses runs/<run>/sft): its workflows parse
        shutil.copytree(warm, Path(cwd) / "runs" / "c" / "sft")
    return run_train(cwd, REPO / "configs/train-toy.yaml", TINY + list(overrides), timeout=900)


@pytest.mark.timeout(1800)  # two runs of the driver, and the session warm start when it is first
def test_a_second_identical_run_is_served_from_the_cache_at_the_same_figures(tmp_path, toy_warm_start):
    cache = ["pool.cache.mode=read-write", f"pool.cache.path={tmp_path / 'cache'}"]
    runs = []
    for name in ("first", "second"):
        (tmp_path / name).mkdir()
        done = train(tmp_path / name, *cache, warm=toy_warm_start)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        runs.append((done, json.loads((tmp_path / name / "runs" / "c" / "summary.json").read_text())))
    (_, first), (second_run, second) = runs
    kept = json.loads((tmp_path / "first" / "runs" / "c" / "cache_occurrences.json").read_text())
    assert sum(sum(counts.values()) for counts in kept.values()) > 0  # what a resumed run would count on from
    figures = second["response_cache"]
    assert figures["mode"] == "read-write" and figures["calls"] == figures["hits"] + figures["misses"]
    assert figures["calls"] == first["response_cache"]["calls"] >= 6  # at least the held-out questions' calls
    assert figures["hit_rate"] >= 0.99, figures
    assert figures["saved_usd"] > 0 and figures["identical_share"] is not None
    assert {key: second[key] for key in SAME_FIGURES} == {key: first[key] for key in SAME_FIGURES}
    steps = [line for line in second_run.stdout.splitlines() if line.startswith("step ")]
    assert len(steps) == 2, steps  # a step whose workflows called workers says how many the cache served
    assert all("cached 100%" in line or "cached 99%" in line for line in steps if "cached" in line), steps


def test_replay_only_with_an_empty_cache_stops_at_the_first_call_naming_it(tmp_path):
    done = train(tmp_path, "sft.steps=1", "pool.cache.mode=replay-only", f"pool.cache.path={tmp_path / 'empty'}")
    assert done.returncode == 4, done.stdout[-2000:] + done.stderr[-3000:]
    assert "pool.cache is replay-only and holds no answer for worker toy-" in done.stdout
    assert "identical request #1 of this run" in done.stdout and "last message 'Question:" in done.stdout
    assert "Traceback" not in done.stderr
