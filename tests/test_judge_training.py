"""A judged open-ended task trains a Conductor: ``cluster.train`` (Ray, vLLM, DeepSpeed) on the shipped open-ended
set (``verifier: judge``, read as a dataset entry) over the simulated ``toy-judged`` pool, whose judge grades
every answer through the pool's actors. The judge's calls and dollars are in the step log and summary.json,
apart from the workers'; the records carry them and the reward never prices them. The evaluation report's
side is tests/test_judge_reward.py's (cluster.evaluate needs no Ray)."""

import json
import re
from pathlib import Path

import pytest

from conductor.replay_store import ReplayStore
from conductor.tasks.open_ended import open_ended_entry
from tests.support.train_cli import run_train
from tests.test_python_reward_training import OVERRIDES

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
PENALTY = 100.0  # per worker dollar: a judge's dollars counted in would move every reward by ~0.03


def test_a_judged_open_ended_task_trains_and_its_judge_is_counted_apart(tmp_path):
    overrides = [f"data.datasets=[{json.dumps(open_ended_entry())}]", "simulator.preset=toy-judged",
                 f"reward.cost_penalty_per_usd={PENALTY}",
                 *[o for o in OVERRIDES if not o.startswith("run_name=")], "run_name=judged"]
    done = run_train(tmp_path, REPO / "configs/train-toy.yaml", overrides)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]

    steps = [line for line in done.stdout.splitlines() if re.match(r"step +\d+ v", line)]
    assert len(steps) == 2 and all(re.search(r"\| judge \d\.\d\d calls \d+ tok \$0\.\d{5}", line) for line in steps)

    summary = json.loads((tmp_path / "runs" / "judged" / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["heldout_questions"] == 6
    assert summary["judge_calls"] > 0 and summary["judge_tokens"] > 0 and summary["judge_cost_usd"] > 0
    assert summary["heldout_judge_calls"] > 0 and summary["heldout_judge_cost_usd"] > 0

    records = ReplayStore(str(tmp_path / "runs" / "judged" / "rollouts")).dataset().to_table().to_pylist()
    assert records and not any(r["infra_error"] for r in records)
    graded = [r for r in records if r["judge_calls"]]
    assert graded and all(r["judge_calls"] == 1 and r["judge_cost_usd"] > 0 for r in graded)
    assert {r["score"] for r in graded} <= {0.0, 1.0}
    for record in graded:  # wrong 0.5, correct 1.0, minus the workers' dollars only
        worker_usd = sum(step["cost_usd"] for step in record["steps"])
        assert record["cost_usd"] == pytest.approx(worker_usd)
        assert record["reward"] == pytest.approx(max(0.5 + 0.5 * record["score"] - PENALTY * worker_usd, 0.0))
