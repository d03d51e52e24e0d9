"""The recursive round against the root answer: accept rates by the root's verdict, broken and repaired."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conductor.evaluation.earlier_outcomes import earlier_outcomes
from conductor.evaluation.outcome import Outcome
from conductor.evaluation.recursion_stats import markdown_lines, recursion_stats


def outcome(method, task, domain, correct, accepted=False):
    return Outcome(method=method, task_id=task, domain=domain, repeat=0, correct=correct, worker_calls=1,
                   worker_prompt_tokens=10, worker_completion_tokens=5, conductor_tokens=3, usd=0.0, latency_s=0.1,
                   steps=1, rounds=1, workers=("w",), access=("[]",), accepted=accepted)


def test_accepts_broken_and_repaired_by_the_root_verdict():
    verdicts = [True, True, True, False, False]
    root = [outcome("conductor", f"q{i}", "math", correct) for i, correct in enumerate(verdicts)]
    second = [outcome("conductor_recursive", "q0", "math", True, accepted=True),
              outcome("conductor_recursive", "q1", "math", True),      # re-ran, still right
              outcome("conductor_recursive", "q2", "math", False),     # broken
              outcome("conductor_recursive", "q3", "math", True),      # repaired
              outcome("conductor_recursive", "q4", "math", False, accepted=True)]
    unscored = [outcome("conductor", "q5", "math", None), outcome("conductor_recursive", "q5", "math", True)]
    stats = recursion_stats(root + second + unscored + [outcome("single:w", "q0", "math", True)])
    assert list(stats) == ["conductor_recursive"]
    row = stats["conductor_recursive"]["math"]
    assert row == {"questions": 5, "root_right": 3, "accept_when_right": pytest.approx(1 / 3),
                   "accept_when_wrong": pytest.approx(1 / 2), "broken": 1, "repaired": 1}
    assert stats["conductor_recursive"]["all"] == row
    assert any("| conductor_recursive | math | 5 | 3 | 33.3% | 50.0% | 1 | 1 | +0 |" in line
               for line in markdown_lines(stats))


def test_a_recursive_row_without_its_root_row_is_not_reported():
    assert recursion_stats([outcome("conductor_cost_recursive", "q0", "math", True)]) == {}
    assert markdown_lines({}) == []


def test_outcome_files_written_before_the_accept_flag_still_read(tmp_path):
    rows = [outcome("conductor", "q0", "math", True).row()]
    del rows[0]["accepted"]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "old.parquet")
    [read] = earlier_outcomes([str(tmp_path / "old.parquet")], ["q0"], 1).outcomes
    assert read.accepted is False and read.correct is True
