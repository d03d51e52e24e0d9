"""A user's own rewards train a Conductor: one ``cluster.train`` run (Ray, vLLM, DeepSpeed, the simulated toy
pool) on two JSONL datasets of the user's, one per reward kind, so CI starts Ray once for both:
- a Python reward, a function in a module outside the package that sits in the job's working directory
  (imported by the driver at config load and by each rollout actor, which Ray gives the driver's working
  directory), as under ``ray job submit --working-dir .``;
- a reward server (``verifier: http``) on loopback, run by this test process and reached by the driver and
  the rollout actors at 127.0.0.1, that fails one POST in ten (hangs, 5xx, garbage, a short scores list)
  and never judges some answers (tests/support/reward_server.py).

The datasets split the toy preset's own questions, so the simulated workers know them and answer them
(``#### N`` or ``Answer: value``). Both rewards give a stated answer 1 if it is the reference and less
otherwise (0.25 and 0.2), so the records carry fractional rewards, and a 0 is a score neither gave."""

import json
import sys
from pathlib import Path

import pytest

from conductor.config_loader import load_config
from conductor.replay_store import ReplayStore
from conductor.tasks import load_tasks
from conductor.tasks.splits import configured_splits
from conductor.tasks.toy import toy_tasks
from tests.support.reward_server import FaultyRewardServer, true_score
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
SERVER = {"timeout_s": 5.0, "retries": 3, "backoff_base_s": 0.1, "backoff_max_s": 1.0, "batch_size": 2}


def write_dataset(path: Path, tasks) -> str:
    path.write_text("".join(json.dumps({"question": t.prompt, "gold": t.answer, "key": t.id, "area": t.domain}) + "\n"
                            for t in tasks))
    return str(path)


def test_a_python_reward_and_a_reward_server_each_train_a_conductor(tmp_path, monkeypatch):
    calls = tmp_path / "calls.jsonl"
    (tmp_path / "toy_reward.py").write_text(REWARD.format(calls=str(calls)))
    toy = toy_tasks(10, seed=0)
    python_tasks, http_tasks = toy[0::2], toy[1::2]
    fields = {"question": "question", "answer": "gold", "id": "key", "domain": "area"}
    python_data = {"path": write_dataset(tmp_path / "questions.jsonl", python_tasks), "fields": fields,
                   "id_prefix": "", "instruction": "", "verifier": "python", "reward_function": "toy_reward:score"}

    # seed 5 fails the first POST (a hang past timeout_s), then one in every ten
    with FaultyRewardServer(seed=5, item_fault_rate=0.1, hang_s=60) as server:
        http_data = {"path": write_dataset(tmp_path / "served.jsonl", http_tasks), "fields": fields, "id_prefix": "",
                     "instruction": "", "verifier": "http", "reward_server": {"url": server.url, **SERVER}}
        overrides = [f"data.datasets=[{json.dumps(python_data)}, {json.dumps(http_data)}]", *OVERRIDES]
        # one held-out question the server never judges: every baseline meets an unscored answer
        server.unjudged_ids = {held_out_http_question(tmp_path, overrides, monkeypatch)}
        done = run_train(tmp_path, REPO / "configs/train-toy.yaml", overrides)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    run = tmp_path / "runs" / "pyreward"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2
    records = ReplayStore(str(run / "rollouts")).dataset().to_table().to_pylist()
    python_ids, http_ids = {t.id for t in python_tasks}, {t.id for t in http_tasks}

    seen = [json.loads(line) for line in calls.read_text().splitlines()]
    assert any(call["actor"] for call in seen)  # imported and called inside the rollout actors
    assert {call["id"] for call in seen} <= python_ids
    python_records = [r for r in records if r["question_id"] in python_ids]
    assert python_records and not any(r["infra_error"] for r in python_records)
    judged = [r for r in python_records if r["score"] is not None]
    assert judged and {r["score"] for r in judged} <= {0.25, 1.0}
    for record in judged:  # no cost penalty in this recipe: wrong + score * (correct - wrong)
        assert record["reward"] == pytest.approx(0.5 + 0.5 * record["score"])
        assert record["correct"] == (record["score"] == 1.0)

    assert server.batch_fault(0) == "hang" and server.fault_counts()["hang"] >= 1  # the run went on past it
    assert len(server.requests) < sum(map(len, server.requests)), server.requests  # POSTs carried batches
    assert {item["id"] for items in server.requests for item in items} <= http_ids
    gold = {t.id: t.answer for t in http_tasks}
    http_records = [r for r in records if r["question_id"] in http_ids]
    assert any(r["score"] is not None for r in http_records)
    for record in http_records:  # a failed call is never scored: the server's score or none at all
        if record["infra_error"]:
            assert record["reward"] is None and record["score"] is None and not record["correct"]
            assert record["infra_error"].startswith(f"verifier: reward server {server.url}: "), record
        elif record["score"] is not None:
            assert not server.item_fault({"id": record["question_id"], "response": record["answer"]})[0], record
            assert record["score"] == true_score(gold[record["question_id"]], record["answer"])
            assert record["reward"] == pytest.approx(0.5 + 0.5 * record["score"])

    # summary.json counts the unscored: training's (of the groups trained), validation's, the held-out ones
    trained = {rid for line in (run / "trained_groups.jsonl").read_text().splitlines()
               for group in json.loads(line)["groups"].values() for rid in group["rollout_ids"]}
    trained_records = [r for r in records if r["rollout_id"] in trained]
    assert summary["train_rollouts"] == len(trained_records) == len(trained)
    assert summary["train_infra_errors"] == sum(bool(r["infra_error"]) for r in trained_records)
    assert summary["val_infra_errors"] >= 0 and summary["heldout_infra_errors"] >= 0
    assert all(count >= 1 for count in summary["baseline_infra_errors"].values()), summary["baseline_infra_errors"]


def held_out_http_question(tmp_path: Path, overrides: list[str], monkeypatch) -> str:
    """The first held-out question of the http dataset, as the run splits them (config load imports the
    Python reward, so its folder goes on sys.path for the while)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_config(REPO / "configs/train-toy.yaml", overrides)
    sys.modules.pop("toy_reward", None)
    tasks = [task for spec in config.data.datasets for task in load_tasks(spec)]
    return next(task.id for task in configured_splits(tasks, config.train).heldout if task.verifier == "http")
