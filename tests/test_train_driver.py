"""`cluster.train` end to end in a subprocess (it owns its Ray cluster): SFT warm start, GRPO steps on the
simulated toy pool through vLLM, DeepSpeed and the weight sync, validation, held-out evaluation, the
saved outputs; then the same run resumed from its checkpoint for two more steps."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conductor.replay_store import ReplayStore

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SMALL = ["run_name=t", "sft.steps=30", "simulator.toy_items_per_domain=10", "train.val_questions=6",
         "train.heldout_questions=9", "train.questions_per_step=3", "rollout.group_size=4", "train.eval_every=2",
         "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0",
         "train.refill_rounds=1"]


def train(cwd, *overrides):
    args = [sys.executable, "-m", "cluster.train", "--config", str(REPO / "configs/train-toy.yaml")]
    for override in SMALL + list(overrides):
        args += ["--set", override]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_train_writes_its_outputs_and_resumes(tmp_path):
    first = train(tmp_path, "train.steps=4")
    assert first.returncode == 0, first.stderr[-3000:]
    run = tmp_path / "runs" / "t"
    summary = json.loads((run / "summary.json").read_text())
    for key in ("heldout_accuracy", "best_single_accuracy", "random_router_accuracy", "steps", "wall_seconds"):
        assert isinstance(summary[key], (int, float)), key
    assert summary["steps"] == 4 and summary["heldout_questions"] == 9
    assert 0 <= summary["heldout_accuracy"] <= 1 and summary["best_single_accuracy"] >= summary["random_router_accuracy"] - 0.5
    assert (run / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [line.split()[1] for line in first.stdout.splitlines() if line.startswith("step ")] == ["1", "2", "3", "4"]
    assert "validation: accuracy" in first.stdout and "held-out accuracy" in first.stdout
    rows = ReplayStore(str(run / "rollouts")).dataset().count_rows()
    assert rows > 4 * 3 * 4  # groups without reward spread (an untrained format) were refilled
    assert ReplayStore(str(run / "rollouts")).versions() == [1, 2, 3, 4]  # v0 is the warm start, replaced at once
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["tag"] == "step-4"

    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert summary["policy_dir"] == "runs/t/policy"
    AutoModelForCausalLM.from_pretrained(run / "policy")
    AutoTokenizer.from_pretrained(run / "policy")

    second = train(tmp_path, "train.steps=6", "train.resume=true")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "resumed from step-4 (step 4" in second.stdout
    assert [line.split()[1] for line in second.stdout.splitlines() if line.startswith("step ")] == ["5", "6"]
    resumed = json.loads((run / "summary.json").read_text())
    assert resumed["steps"] == 6
    versions = ReplayStore(str(run / "rollouts")).versions()
    assert versions[:4] == [1, 2, 3, 4] and len(versions) == 6 and min(versions[4:]) > 5  # past the checkpoint's v5


def test_a_collapsed_format_rolls_back_then_stops_with_advice(tmp_path):
    """A floor no policy can meet: every step past the first checkpoint rolls back, and the fourth
    collapse ends the run with a clear message instead of training on all-zero advantages."""
    result = train(tmp_path, "train.steps=8", "train.format_floor=1.0", "train.format_patience=1")
    assert result.returncode != 0
    assert result.stdout.count("rolled back to step-2") == 3
    assert "sampled format rate collapsed 4 times" in result.stderr
