"""The report's rules on handmade outcomes: the oracle's unscored questions and the best single worker."""

import math

from conductor.evaluation.outcome import Outcome
from conductor.evaluation.report import best_of, summarise, with_oracle


def outcome(method, task_id, correct):
    return Outcome(method=method, task_id=task_id, domain="math", repeat=0, correct=correct, worker_calls=1,
                   worker_prompt_tokens=10, worker_completion_tokens=10, conductor_tokens=0, usd=0.01,
                   latency_s=1.0, steps=1, rounds=1, workers=(method.split(":")[-1],), access=("[]",),
                   error="down" if correct is None else None)


def oracle_accuracy(errors_on):
    rows = []
    for i in range(10):  # a is right on q0-q4; b is always wrong; c fails on ``errors_on``, else is wrong
        rows += [outcome("single:a", f"q{i}", i < 5), outcome("single:b", f"q{i}", False),
                 outcome("single:c", f"q{i}", None if i in errors_on else False)]
    return summarise(with_oracle(rows))["oracle"]["math"]


def test_where_a_worker_failed_does_not_move_the_oracle_one_way():
    """A question every answering worker got wrong was dropped when another failed, while a right one always
    counted: errors on wrong questions lifted the oracle to 0.714 of 0.500."""
    on_wrong, on_right = oracle_accuracy({5, 6, 7}), oracle_accuracy({0, 1, 2})
    assert (on_wrong.n, on_right.n) == (7, 7) and on_wrong.infra_errors == on_right.infra_errors == 3
    assert (on_wrong.accuracy + on_right.accuracy) / 2 == 0.5  # unbiased between the two placements


def test_a_worker_with_nothing_scored_is_not_the_best_single_worker():
    table = summarise([outcome("single:a", "q0", None), outcome("single:b", "q0", True),
                       outcome("single:b", "q1", False)])
    assert math.isnan(table["single:a"]["math"].accuracy)
    name, cell = best_of(table, "single:", "math")
    assert name == "single:b" and cell.accuracy == 0.5


def test_a_reused_file_with_a_method_twice_on_a_question_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    import pytest

    from conductor.evaluation.earlier_outcomes import earlier_outcomes

    rows = [outcome("single:a", "q0", True), outcome("single:a", "q0", False)]
    pq.write_table(pa.Table.from_pylist([o.row() for o in rows]), tmp_path / "old.parquet")
    with pytest.raises(ValueError, match="has method 'single:a' twice on some question-repeat"):
        earlier_outcomes([str(tmp_path / "old.parquet")], ["q0"], 1)


def test_reused_rows_must_share_the_pool_and_under_this_policys_names_the_policy():
    """Another checkpoint's rows, under their own name, sit beside this one's by design (make results-paper7);
    rows under this evaluation's own names from another policy would be paired with its rows as one."""
    import pytest

    from conductor.config_loader import load_config
    from conductor.evaluation.outcome_provenance import check_reused, method_keys

    first = load_config("configs/train-toy.yaml", ["evaluate.policy=runs/a/policy"])
    stored = {"conductor": method_keys(first, "conductor"), "single:toy-arith": method_keys(first, "single:toy-arith")}
    other_checkpoint = load_config("configs/train-toy.yaml", ["evaluate.policy=runs/b/policy",
                                                              "evaluate.conductor_name=conductor_b"])
    check_reused(other_checkpoint, ["conductor", "single:toy-arith"], stored)
    same_name = load_config("configs/train-toy.yaml", ["evaluate.policy=runs/b/policy"])
    with pytest.raises(ValueError, match="conductor came from another policy or sampling"):
        check_reused(same_name, ["conductor"], stored)
    check_reused(load_config("configs/train-toy.yaml", []), ["conductor"], stored)  # no policy runs: read only
    other_seed = load_config("configs/train-toy.yaml", ["evaluate.policy=runs/a/policy", "seed=3"])
    with pytest.raises(ValueError, match="single:toy-arith were evaluated"):
        check_reused(other_seed, ["single:toy-arith"], stored)
