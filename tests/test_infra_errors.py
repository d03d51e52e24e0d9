"""A sandbox that refuses to run code is an infrastructure error from the verifier to ``summary.json``.

The real driver (`cluster.train`: vLLM, Ray, DeepSpeed, the simulated `paper-7` pool, whose questions
include HumanEval) runs on a host whose kernel policy forbids user namespaces, as Docker's default
seccomp profile does (tests/support/without_user_namespaces.py: a real refusal, inherited by every Ray
process), with ``verifier.require_code_isolation=true``. Every code answer that reaches verification
must then be unscored (``reward=None``, ``infra_error`` set), never a wrong answer, and counted apart.
"""

import json
from pathlib import Path

import pytest

from cluster.rollouts import tasks_for
from conductor.config_loader import load_config
from conductor.replay_store import ReplayStore
from conductor.tasks.splits import configured_splits
from tests.support.train_cli import run_train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
OVERRIDES = ["run_name=refused", "sft.steps=20", "simulator.preset=paper-7", "simulator.mmlu_items=40",
             "simulator.latency_scale=0", f"simulator.data_dir={REPO.parent / 'shared' / 'data'}",
             "verifier.require_code_isolation=true", "engine.max_model_len=4096",  # paper-7 prompts pass 2048
             "train.steps=2", "train.val_questions=4",
             "train.heldout_questions=10", "train.questions_per_step=4", "rollout.group_size=4",
             "train.eval_every=2", "learner.checkpoint_every=2", "learner.micro_batch_size=8",
             "train.format_floor=0", "train.refill_rounds=0", "train.plot=false", "train.max_staleness=0"]


def test_a_refused_sandbox_is_an_infra_error_from_the_verifier_to_the_summary(tmp_path):
    done = run_train(tmp_path, REPO / "configs/train-toy.yaml", OVERRIDES,
                     wrapper=("-m", "tests.support.without_user_namespaces"))
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "refused" / "summary.json").read_text())

    # The held-out code questions, from the split the driver documents (independent of its counting).
    config = load_config(str(REPO / "configs/train-toy.yaml"), OVERRIDES)
    heldout = configured_splits(tasks_for(config), config.train).heldout
    code_questions = sum(task.verifier == "humaneval" for task in heldout)
    assert 0 < code_questions < len(heldout)

    # Fixed routers always reach verification: exactly the code questions are unscored, for each one.
    assert summary["baseline_infra_errors"] == {name: code_questions
                                                for name in [*summary["single_worker_accuracy"], "random"]}
    assert summary["heldout_questions"] == len(heldout)
    assert summary["heldout_question_ids"] == [task.id for task in heldout]
    assert summary["heldout_scored"] + summary["heldout_infra_errors"] == len(heldout)
    assert summary["heldout_infra_errors"] <= code_questions  # only parsed workflows reach a verifier
    assert summary["code_isolation_required"] is True
    assert summary["sandbox_isolation"]["user_namespace"] is False and summary["sandbox_isolation"]["seccomp"]
    assert "unscored (infrastructure errors" in done.stdout

    # Training records: a code answer that reached the sandbox is unscored, never a wrong answer.
    records = ReplayStore(str(tmp_path / "runs" / "refused" / "rollouts")).dataset().to_table().to_pylist()
    code_ids = {task.id for task in tasks_for(config) if task.verifier == "humaneval"}
    verified_code = [r for r in records if r["question_id"] in code_ids and r["format_ok"] and r["answer"]]
    for record in verified_code:
        assert record["infra_error"].startswith("verifier: refused: isolation layers unavailable"), record
        assert record["reward"] is None and record["correct"] is False
    assert all(r["reward"] is not None for r in records if r["question_id"] not in code_ids and not r["infra_error"])
