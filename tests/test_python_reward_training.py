"""A user's Python reward trains a Conductor: ``cluster.train`` (Ray, vLLM, DeepSpeed, the simulated toy
pool) on a JSONL dataset of the user's, scored by a function in a module outside the package that sits in
the job's working directory (imported by the driver at config load and by each rollout actor, which Ray
gives the driver's working directory), as under ``ray job submit --working-dir .``.

The dataset holds the toy preset's own questions, so the simulated workers know them and answer them
(``#### N`` or ``Answer: value``); the reward gives a stated answer 1 if it is the reference and 0.25
otherwise, so the records carry fractional rewards."""

import json
from pathlib import Path

import pytest

from conductor.replay_store import ReplayStore
from conductor.tasks.toy import toy_tasks
from tests.support.train_cli import run_train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]

REWARD = '''
import json

import ray

CALLS = {calls!r}


def score(task, response):
    actor = ray.get_runtime_context().get_actor_id() if ray.is_initialized() else None
    with open(CALLS, "a") as handle:
        handle.write(json.dumps({{"actor": actor, "id": task["id"]}}) + "\\n")
    last = response.strip().splitlines()[-1]
    stated = last.replace("####", "").replace("Answer:", "").strip()
    return 1.0 if stated == task["answer"] else 0.25
'''

OVERRIDES = ["run_name=pyreward", "sft.steps=150", "simulator.toy_items_per_domain=10", "train.val_questions=6",
             "train.heldout_questions=6", "train.questions_per_step=3", "rollout.group_size=4", "train.steps=2",
             "train.eval_every=2", "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0",
             "train.refill_rounds=0", "train.max_staleness=0", "train.plot=false",
             "rollout.temperature=0.3"]  # a warm start this short formats few samples at T=1: the store needs some


def test_a_reward_function_from_the_users_module_trains_a_conductor(tmp_path):
    calls = tmp_path / "calls.jsonl"
    (tmp_path / "toy_reward.py").write_text(REWARD.format(calls=str(calls)))
    data = tmp_path / "questions.jsonl"
    data.write_text("".join(json.dumps({"question": t.prompt, "gold": t.answer, "key": t.id, "area": t.domain}) + "\n"
                            for t in toy_tasks(10, seed=0)))
    dataset = {"path": str(data), "fields": {"question": "question", "answer": "gold", "id": "key", "domain": "area"},
               "id_prefix": "", "instruction": "", "verifier": "python", "reward_function": "toy_reward:score"}
    done = run_train(tmp_path, REPO / "configs/train-toy.yaml", [f"data.datasets=[{json.dumps(dataset)}]", *OVERRIDES])
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    summary = json.loads((tmp_path / "runs" / "pyreward" / "summary.json").read_text())
    assert summary["steps"] == 2

    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    assert any(call["actor"] for call in seen)  # imported and called inside the rollout actors
    assert {call["id"] for call in seen} <= {t.id for t in toy_tasks(10, seed=0)}

    records = ReplayStore(str(tmp_path / "runs" / "pyreward" / "rollouts")).dataset().to_table().to_pylist()
    assert records and not any(r["infra_error"] for r in records)
    judged = [r for r in records if r["score"] is not None]
    assert judged and {r["score"] for r in judged} <= {0.25, 1.0}
    for record in judged:  # no cost penalty in this recipe: wrong + score * (correct - wrong)
        assert record["reward"] == pytest.approx(0.5 + 0.5 * record["score"])
        assert record["correct"] == (record["score"] == 1.0)
