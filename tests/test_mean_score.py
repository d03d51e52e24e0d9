"""A graded reward's mean score (a user's Python reward gives fractions; accuracy counts 0.5 or more as right):
over the scored rollouts or attempts that carry a score, in the step's figures and log line, summary.json's
held-out part, and the evaluation's report.json, report.md and table; absent wherever no score was graded."""

import json

import pytest
from rich.console import Console

from cluster.evaluate import print_table
from cluster.train_report import heldout_summary, log_line
from conductor.evaluation.outcome import Outcome
from conductor.evaluation.report import AVERAGE, as_json, summarise, with_oracle
from conductor.evaluation.report_files import markdown
from conductor.rollout_record import RolloutRecord
from conductor.tasks.task import Task


def record(i: int, score, reward=None, infra=None) -> RolloutRecord:
    correct = score is not None and score >= 0.5
    return RolloutRecord(f"r{i}", f"g{i}", f"q{i}", 1, [1], [2], [0.0], "", True, correct,
                         None if infra else (reward if reward is not None else 0.5 + 0.5 * (score or 0.0)),
                         domain="d", infra_error=infra, score=score)


def outcome(method: str, task: str, domain: str, correct, score=None) -> Outcome:
    return Outcome(method=method, task_id=task, domain=domain, repeat=0, correct=correct, worker_calls=1,
                   worker_prompt_tokens=10, worker_completion_tokens=5, conductor_tokens=0, usd=0.001,
                   latency_s=0.1, steps=1, rounds=1, workers=("w",), access=("[]",),
                   error="down" if correct is None else None, score=score)


def test_graded_rollouts_have_a_mean_score_in_the_step_figures_the_log_line_and_summary_json():
    from conductor.rollout_summary import summarise as rollout_stats

    # 0.25 and 1.0 graded, one right/wrong verdict of a built-in verifier (no score), one infrastructure error
    records = [record(0, 0.25), record(1, 1.0), record(2, None, reward=1.0), record(3, None, infra="down")]
    stats = rollout_stats(records)
    assert stats.mean_score == pytest.approx(0.625) and stats.as_dict()["mean_score"] == pytest.approx(0.625)
    assert stats.accuracy == pytest.approx(1 / 3)  # 1.0 counts as right, 0.25 wrong, the verdict wrong
    assert "score 0.625" in log_line({"step": 1, "version": 1, **stats.as_dict()})
    tasks = [Task(f"q{i}", "d", "?", "", "python") for i in range(4)]
    assert heldout_summary(stats, tasks)["heldout_mean_score"] == pytest.approx(0.625)

    ungraded = rollout_stats([record(2, None, reward=1.0), record(3, None, infra="down")])
    assert ungraded.mean_score is None and "mean_score" not in ungraded.as_dict()
    assert "score" not in log_line({"step": 1, "version": 1, **ungraded.as_dict()})
    assert "heldout_mean_score" not in heldout_summary(ungraded, tasks)


def test_the_evaluation_report_shows_a_mean_score_only_where_graded_scores_exist():
    graded = [outcome("single:a", "t1", "x", True, 1.0), outcome("single:a", "t2", "x", False, 0.2),
              outcome("single:a", "t3", "y", None),  # an infrastructure error: no score, out of the mean
              outcome("single:b", "t1", "x", False, 0.4), outcome("single:b", "t2", "x", True, 0.6),
              outcome("single:b", "t3", "y", True, 0.5)]
    table = summarise(with_oracle(graded))
    a, b = table["single:a"], table["single:b"]
    assert a["x"].mean_score == pytest.approx(0.6) and a["y"].mean_score is None
    assert a[AVERAGE].mean_score == pytest.approx(0.6)  # over the domains that have one
    assert b[AVERAGE].mean_score == pytest.approx((0.5 + 0.5) / 2)
    assert table["oracle"]["x"].mean_score == pytest.approx((1.0 + 0.6) / 2)  # the best single score per question

    report = json.loads(json.dumps(as_json(table, {})))
    assert report["methods"]["single:a"]["x"]["mean_score"] == pytest.approx(0.6)
    assert "mean_score" not in report["methods"]["single:a"]["y"]
    text = markdown(table, {})
    assert "| average | mean score | calls |" in text and "| 0.600 | 1.00 |" in text
    console = Console(width=200, record=True)
    print_table(console, table, ["x", "y"])
    assert "score" in console.export_text()

    plain = [outcome("single:a", "t1", "x", True), outcome("single:a", "t2", "x", False)]
    table = summarise(plain)
    assert table["single:a"][AVERAGE].mean_score is None
    assert "mean_score" not in as_json(table, {})["methods"]["single:a"][AVERAGE]
    assert "mean score" not in markdown(table, {})
    console = Console(width=200, record=True)
    print_table(console, table, ["x"])
    assert "score" not in console.export_text()
