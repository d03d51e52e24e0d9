"""`cluster.train` end to end in a subprocess (it owns its Ray cluster): SFT warm start, GRPO steps on the
simulated toy pool through vLLM, DeepSpeed and the weight sync, validation, held-out evaluation, the
saved outputs; a run whose format floor no policy meets rolls back and stops, and learns what the first
run learned until the floor acts. Resume: tests/test_cluster_job.py; under a spend cap: tests/test_train_async.py."""

import json
import random
import re
from pathlib import Path

import pytest

from conductor.replay_store import ReplayStore
from tests.support.train_cli import run_train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SMALL = ["run_name=t", "sft.steps=30", "simulator.toy_items_per_domain=10", "train.val_questions=6",
         "train.heldout_questions=9", "train.questions_per_step=3", "rollout.group_size=4", "train.eval_every=2",
         "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0",
         "train.refill_rounds=1", "train.max_staleness=0"]  # the synchronous loop (tests/test_train_async.py: k >= 1)
# The shared 4-step run also validates format-constrained, before step 1 too, and holds a token budget (its
# multiplier is logged)
FIRST = ["train.steps=4", "train.val_constrain_format=true", "reward.worker_token_budget=300",
         "train.val_before_train=true"]


def independent_baselines(*overrides):
    """What the driver's fixed-router baselines must score, computed without conductor/baselines.py or
    the executor: the held-out split rebuilt the documented way (``split_tasks`` on the preset's tasks,
    seeded by ``seed``), each question sent as a bare user message straight to a simulator (same preset,
    seed, boost and mislead as the run's) with the official ``openai`` client, each reply checked with
    ``conductor.verifiers.verify``. Returns ({worker: [right per held-out question]}, held-out tasks, seed).
    One-step workflows give the worker no earlier turns, so the driver's workers see the same item with
    no context and the oracle's answer is the same (its draws hash worker, item and context only)."""
    import openai

    from conductor.config_loader import load_config
    from conductor.simulator.presets import load_preset
    from conductor.simulator.server import SimulatorServer
    from conductor.tasks.splits import configured_splits
    from conductor.verifiers.verify import verify

    config = load_config(REPO / "configs/train-toy.yaml", SMALL + list(overrides))
    heldout = configured_splits(load_preset(config.simulator).tasks, config.train).heldout
    with SimulatorServer(config.simulator.model_copy(update={"port": 0, "latency_scale": 0.0})) as sim:
        client = openai.OpenAI(base_url=sim.base_url, api_key="unused", max_retries=0, timeout=30)
        workers = [model.id for model in client.models.list().data]
        right = {}
        for worker in workers:
            right[worker] = []
            for task in heldout:
                reply = client.chat.completions.create(model=worker,
                                                       messages=[{"role": "user", "content": task.prompt}])
                right[worker].append(verify(task, reply.choices[0].message.content, config.verifier).correct)
    return right, heldout, config.seed


def train(cwd, *overrides):
    return run_train(cwd, REPO / "configs/train-toy.yaml", SMALL + list(overrides), timeout=600)


def test_train_writes_its_outputs(first):
    cwd, first = first
    assert first.returncode == 0, first.stderr[-3000:]
    run = cwd / "runs" / "t"
    summary = json.loads((run / "summary.json").read_text())
    for key in ("heldout_accuracy", "best_single_accuracy", "random_router_accuracy", "steps", "wall_seconds"):
        assert isinstance(summary[key], (int, float)), key
    assert summary["steps"] == 4 and summary["heldout_questions"] == 9

    # Baselines against an independent computation (see independent_baselines). Accuracies are k/9, so
    # 1e-9 only absorbs float rounding; any different count is off by >= 0.11.
    right, heldout, seed = independent_baselines(*FIRST)
    n = len(heldout)
    assert n == 9
    expected_single = {worker: sum(hits) / n for worker, hits in right.items()}
    assert summary["single_worker_accuracy"] == pytest.approx(expected_single, abs=1e-9)
    assert summary["best_single_accuracy"] == pytest.approx(max(expected_single.values()), abs=1e-9)
    # The random router's documented draw: random.Random(seed), one uniform worker per held-out question,
    # in split order, over the roster in its configured order (the simulator's /v1/models order).
    draw, workers = random.Random(seed), list(right)
    routed = [right[workers[draw.randrange(len(workers))]][i] for i in range(n)]
    assert summary["random_router_accuracy"] == pytest.approx(sum(routed) / n, abs=1e-9)
    # The specialists are not interchangeable on this split (else per-worker checks would be weak).
    assert len(set(expected_single.values())) > 1
    # The per-domain table: each domain's questions to the worker right on most of them.
    table_right = sum(max(sum(hits[i] for i in range(n) if heldout[i].domain == domain) for hits in right.values())
                      for domain in {task.domain for task in heldout})
    assert summary["domain_table_accuracy"] == pytest.approx(table_right / n, abs=1e-9)

    # Held-out accuracy of the trained policy: a count over the 9 questions, no infra errors on a
    # fault-free simulator, never above the share of parsed workflows, and never above the oracle
    # router (an item no worker gets right alone cannot be answered: a boost needs a right earlier turn,
    # which needs a worker right without help), and the margin is the difference it claims to be.
    assert summary.get("heldout_infra_errors", 0) == 0
    heldout_right = summary["heldout_accuracy"] * n
    assert heldout_right == pytest.approx(round(heldout_right), abs=1e-9)
    assert summary["heldout_accuracy"] <= summary["heldout_format_rate"] + 1e-9
    oracle = sum(any(hits[i] for hits in right.values()) for i in range(n))
    assert round(heldout_right) <= oracle
    assert summary["margin_over_best_single"] == pytest.approx(
        summary["heldout_accuracy"] - summary["best_single_accuracy"], abs=1e-9)
    printed = re.search(r"trained Conductor\W+([0-9.]+)", first.stdout)
    assert printed and float(printed.group(1)) == pytest.approx(summary["heldout_accuracy"], abs=5e-4)
    assert (run / "curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [line.split()[1] for line in first.stdout.splitlines() if line.startswith("step ")] == ["1", "2", "3", "4"]
    assert "validation: accuracy" in first.stdout and "held-out accuracy" in first.stdout
    state = json.loads((run / "checkpoints" / "step-4" / "trainer_state.json").read_text())
    assert [e["step"] for e in state["evals"]] == [0, 2, 4]  # the warm start validated before step 1
    rows = ReplayStore(str(run / "rollouts")).dataset().count_rows()
    assert rows > 4 * 3 * 4  # groups without reward spread (an untrained format) were refilled
    assert ReplayStore(str(run / "rollouts")).versions() == [1, 2, 3, 4]  # v0 is the warm start, replaced at once
    assert json.loads((run / "checkpoints" / "latest.json").read_text())["tag"] == "step-4"
    state = json.loads((run / "checkpoints" / "step-4" / "trainer_state.json").read_text())
    multipliers = [row["token_multiplier"] for row in state["history"]]  # the token budget's lambda, kept
    assert len(multipliers) == 4 and state["token_multiplier"] == multipliers[-1] >= 0
    assert all(f"lambda {m:.3f}" in first.stdout for m in multipliers)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    assert Path(summary["policy_dir"]).resolve() == (run / "policy").resolve()
    AutoModelForCausalLM.from_pretrained(run / "policy")
    AutoTokenizer.from_pretrained(run / "policy")

    # Repeatability: the collapsed-format test below (a second run of the same seed learns the same until
    # its format floor first acts). Resuming from a checkpoint: tests/test_cluster_job.py.


@pytest.fixture(scope="module")
def first(tmp_path_factory):
    """The small toy run of 4 steps, shared: its outputs are checked, and a second run is compared to it."""
    cwd = tmp_path_factory.mktemp("first")
    return cwd, train(cwd, *FIRST)


def learning(run: Path, tag: str = "") -> list[tuple]:
    """What a run learned up to a checkpoint (its newest by default), step by step, without its timings:
    rewards, losses, norms, validation. Not what the validations cost: the pool's $ counter adds calls in
    the order they end, so its differences vary in their last bits."""
    tag = tag or json.loads((run / "checkpoints" / "latest.json").read_text())["tag"]
    state = json.loads((run / "checkpoints" / tag / "trainer_state.json").read_text())
    keys = ("mean_reward", "accuracy", "format_rate", "loss", "grad_norm", "conductor_tokens_per_rollout")
    validations = [tuple(v for k, v in e.items() if not k.startswith("val_cost")) for e in state["evals"]]
    return [tuple(row[key] for key in keys) for row in state["history"]] + validations


def test_a_collapsed_format_rolls_back_then_stops_with_advice_and_repeats_the_run_before(first, tmp_path):
    """A floor no policy can meet: every step past the first checkpoint rolls back, and the fourth
    collapse ends the run with a clear message instead of training on all-zero advantages. Until that
    first checkpoint (step 2) the floor cannot act, so this run is the 4-step run again with the same
    seed on the same machine: it must have learned exactly the same by then."""
    result = train(tmp_path, *FIRST, "train.steps=8", "train.format_floor=1.0", "train.format_patience=1")
    assert result.returncode != 0
    assert result.stdout.count("rolled back to step-2") == 3
    assert "sampled format rate collapsed 4 times" in result.stderr
    before = learning(first[0] / "runs" / "t", "step-2")  # steps 1 and 2, the validations at 0 and 2
    assert len(before) == 4 and learning(tmp_path / "runs" / "t", "step-2") == before
