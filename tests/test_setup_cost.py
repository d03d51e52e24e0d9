"""bench/setup_cost.py on the toy through a real simulator: what the warm start's measured prior and the
held-out baselines cost against conductor/setup_cost.py's estimates, one row each; and the estimate has no
row for a warm start that measures nothing."""

from bench.setup_cost import measure
from conductor.config_loader import load_config
from conductor.setup_cost import measurement_estimate

TOY = "configs/train-toy.yaml"
SMALL = ["simulator.toy_items_per_domain=10", "train.val_questions=6", "train.heldout_questions=6"]


def test_each_measurement_before_the_loop_is_estimated_and_measured():
    rows = measure(TOY, [*SMALL, "sft.worker_prior=domain_reward", "sft.prior_questions=4"])
    assert [what.split(" (")[0] for what, _, _ in rows] == ["warm start", "held-out baselines"]
    assert all(estimate > 0 and spent > 0 for _, estimate, spent in rows)


def test_a_warm_start_that_measures_nothing_has_no_estimate():
    for prior in ("uniform", "random"):
        assert measurement_estimate(load_config(TOY, [*SMALL, f"sft.worker_prior={prior}"]), []) is None
    assert measurement_estimate(load_config(TOY, [*SMALL, "sft.worker_prior=domain_reward", "sft.steps=0"]), []) is None
