"""A user's own rewards train a Conductor: one ``cluster.train`` run (Ray, vLLM, DeepSpeed, a simulated pool of
the user's own: the toy's three specialists and a judge) on three datasets, one per reward kind, so CI starts
Ray once for all three:
- a Python reward, a function in a module outside the package that sits in the job's working directory
  (imported by the driver at config load and by each rollout actor, which Ray gives the driver's working
  directory), as under ``ray job submit --working-dir .``;
- a reward server (``verifier: http``) on loopback, run by this test process and reached by the driver and
  the rollout actors at 127.0.0.1, that fails one POST in ten (hangs, 5xx, garbage, a short scores list)
  and never judges some answers (tests/support/reward_server.py);
- an LLM judge (``verifier: judge``) on the shipped open-ended set, graded by the pool's simulated judge
  through the rollout actors' pool: its calls and dollars appear in the step log and summary.json apart from
  the workers', and never in the reward's cost penalty (``PENALTY`` makes a judge's dollars visible there).

The first two datasets split the toy's own questions; the preset file lists all three entries, so the
simulated workers know every question. The Python reward and the server give a stated answer 1 if it is the
reference and less otherwise (0.25 and 0.2), so the records carry fractional rewards, and a 0 is a score
neither gave."""

import json
import re
import sys
from pathlib import Path

import pytest

from conductor.config_loader import load_config
from conductor.replay_store import ReplayStore
from conductor.simulator.preset_file import read_preset_file
from conductor.tasks import load_tasks
from conductor.tasks.open_ended import open_ended_entry
from conductor.tasks.splits import configured_splits, training_sampler
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

OVERRIDES = ["run_name=pyreward", "sft.steps=200", "simulator.toy_items_per_domain=10", "train.val_questions=6",
             "train.heldout_questions=6", "train.questions_per_step=3", "rollout.group_size=4", "train.steps=2",
             "train.eval_every=2", "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0",
             "train.refill_rounds=0", "train.max_staleness=0", "train.plot=false",
             "rollout.temperature=0.3",  # a warm start this short formats few samples at T=1: the store needs some
             "train.val_constrain_format=true",  # held-out answers parse, so the judged ones meet the judge
             "rollout.max_new_tokens=160"]
PENALTY = 100.0  # per worker dollar: a judge's dollars counted in would move a judged reward by ~0.03
SERVER = {"timeout_s": 10.0, "retries": 3, "backoff_base_s": 0.1, "backoff_max_s": 1.0, "batch_size": 2,
          "batch_wait_s": 0.2}  # long enough on a loaded machine for two checks to share a POST


def write_dataset(path: Path, tasks) -> str:
    path.write_text("".join(json.dumps({"question": t.prompt, "gold": t.answer, "key": t.id, "area": t.domain}) + "\n"
                            for t in tasks))
    return str(path)


def write_preset(tmp_path: Path, datasets: list[dict]) -> str:
    """The toy's specialists, each also strong in one open-ended domain, toy-judged's judge, all three sets."""
    toy, judged = read_preset_file("toy"), read_preset_file("toy-judged")
    workers = [{**mine.model_dump(exclude_none=True), "accuracy": {**mine.accuracy, **theirs.accuracy}}
               for mine, theirs in zip(toy.workers, judged.workers)]
    preset = {"name": "plugins", "workers": workers, "judge": judged.judge.model_dump(),
              "tasks": {"datasets": datasets}}
    path = tmp_path / "plugins.yaml"
    path.write_text(json.dumps(preset))
    return str(path)


def test_a_python_reward_a_reward_server_and_a_judge_each_train_a_conductor(tmp_path, monkeypatch):
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
        datasets = [python_data, http_data, open_ended_entry()]
        overrides = [f"data.datasets={json.dumps(datasets)}", f"simulator.preset={write_preset(tmp_path, datasets)}",
                     f"reward.cost_penalty_per_usd={PENALTY}", *OVERRIDES]
        # one held-out question the server never judges: every baseline meets an unscored answer
        seed, unjudged = plan_run(tmp_path, overrides, monkeypatch)
        server.unjudged_ids = {unjudged}
        overrides.append(f"seed={seed}")
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
    for record in judged:  # wrong + score * (correct - wrong), less the workers' dollars
        assert record["reward"] == pytest.approx(reward_of(record))
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
            assert record["reward"] == pytest.approx(reward_of(record))

    # summary.json counts the unscored: training's (of the groups trained), validation's, the held-out ones
    trained = {rid for line in (run / "trained_groups.jsonl").read_text().splitlines()
               for group in json.loads(line)["groups"].values() for rid in group["rollout_ids"]}
    trained_records = [r for r in records if r["rollout_id"] in trained]
    assert summary["train_rollouts"] == len(trained_records) == len(trained)
    assert summary["train_infra_errors"] == sum(bool(r["infra_error"]) for r in trained_records)
    assert {"val_infra_errors", "heldout_infra_errors"} <= set(summary)
    assert all(count >= 1 for count in summary["baseline_infra_errors"].values()), summary["baseline_infra_errors"]

    # the judge: one call per graded answer, its dollars apart from the workers' and out of the reward
    steps = [line for line in done.stdout.splitlines() if re.match(r"step +\d+ v", line)]
    judge_part = r"\| judge \d\.\d\d calls \d+ tok \$0\.\d{5}( \||$)"  # on a step whose rollouts met the judge
    assert len(steps) == 2 and any(re.search(judge_part, line) for line in steps), steps
    assert summary["judge_calls"] > 0 and summary["judge_tokens"] > 0 and summary["judge_cost_usd"] > 0
    assert summary["heldout_judge_calls"] > 0 and summary["heldout_judge_cost_usd"] > 0
    graded = [r for r in records if r["judge_calls"]]
    assert graded and all(r["question_id"].startswith("open/") for r in graded)
    assert all(r["judge_calls"] == 1 and r["judge_cost_usd"] > 0 for r in graded)
    assert {r["score"] for r in graded} <= {0.0, 1.0} and not any(r["infra_error"] for r in graded)
    for record in graded:
        assert record["cost_usd"] == pytest.approx(sum(step["cost_usd"] for step in record["steps"]))
        assert record["reward"] == pytest.approx(reward_of(record))


def reward_of(record: dict) -> float:
    """wrong (0.5) + score * (correct - wrong), less PENALTY per dollar the workers (not the judge) spent."""
    worker_usd = sum(step["cost_usd"] for step in record["steps"])
    return max(0.5 + 0.5 * record["score"] - PENALTY * worker_usd, 0.0)


def plan_run(tmp_path: Path, overrides: list[str], monkeypatch) -> tuple[int, str]:
    """The first ``seed`` whose two training steps draw questions of all three kinds (the sampler is seeded:
    the run draws just these), and the first held-out question of the http dataset, as the run splits them
    (config load imports the Python reward, so its folder goes on sys.path for the while)."""
    monkeypatch.syspath_prepend(str(tmp_path))
    config = load_config(REPO / "configs/train-toy.yaml", overrides)
    sys.modules.pop("toy_reward", None)
    tasks = [task for spec in config.data.datasets for task in load_tasks(spec)]
    splits = configured_splits(tasks, config.train)
    assert {t.verifier for t in splits.heldout} == {"python", "http", "judge"}
    drawn = 2 * config.train.questions_per_step
    seed = next(seed for seed in range(100)
                if {t.verifier for t in training_sampler(splits.train, seed, None, {}).next(drawn)} ==
                {"python", "http", "judge"})
    return seed, next(task.id for task in splits.heldout if task.verifier == "http")
