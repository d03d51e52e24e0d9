"""The SFT warm start's menu of workflows: the pairs among each domain's best workers alone, the softmax over
the items' measured rewards times their shape's weight, a roster's view of it, and the warm start measuring
it through the real simulator server (HTTP, the official client in the pool) and teaching its examples."""

import math

import pytest
from rich.console import Console

from cluster.warm_start import warm_start_policy
from conductor.config import SftConfig
from conductor.config_loader import load_config
from conductor.run_output import RunOutput
from conductor.workflow_prior import item_name, menu_prior, pair_items, roster_menu
from tests.support.measured_warm_start import measured_warm_start


def test_pairs_are_every_ordered_pair_of_the_best_workers_alone():
    singles = {"a": 0.5, "b": 0.9, "c": 0.7, "d": 0.1}
    assert pair_items(singles, 2) == [("b", "b"), ("b", "c"), ("c", "b"), ("c", "c")]
    assert len(pair_items(singles, 3)) == 9 and ("d", "b") not in pair_items(singles, 3)
    assert pair_items({"x": 0.5, "a": 0.5}, 1) == [("a", "a")]  # ties broken by name: a stable menu
    assert item_name(("b", "c")) == "b>c" and item_name(("b",)) == "b"


def test_the_prior_is_a_softmax_of_the_rewards_times_the_shape_weight():
    rewards = {"math": {("a",): 0.80, ("b",): 0.70, ("a", "b"): 0.90}}
    prior = menu_prior(rewards, {"solve": 1.0, "verify": 1.0}, temperature=0.1)["math"]
    assert prior[("a", "b")] / prior[("a",)] == pytest.approx(math.e)
    assert sum(prior.values()) == pytest.approx(1)
    weighted = menu_prior(rewards, {"solve": 3.0, "verify": 1.0}, temperature=0.1)["math"]
    assert weighted[("a",)] / weighted[("a", "b")] == pytest.approx(3 / math.e)
    singles_only = menu_prior(rewards, {"solve": 1.0}, temperature=0.1)["math"]
    assert set(singles_only) == {("a",), ("b",)}
    assert menu_prior(rewards, {"solve": 1.0, "verify": 1.0}, temperature=0.001)["math"][("a", "b")] > 0.999
    with pytest.raises(ValueError, match="prior_temperature"):
        menu_prior(rewards, {"solve": 1.0}, temperature=0)
    with pytest.raises(ValueError, match="no menu item of domain math"):
        menu_prior(rewards, {"plan": 1.0}, temperature=0.1)
    with pytest.raises(ValueError, match="domain code was measured: every call failed on infrastructure"):
        menu_prior({"code": {}}, {"solve": 1.0}, temperature=0.1)


def test_a_rosters_menu_names_its_shown_indices_and_drops_what_it_does_not_show():
    prior = {"code": {("a",): 0.2, ("b", "a"): 0.5, ("c", "a"): 0.3}}
    assert roster_menu(prior, "code", ["a", "b"]) == [((0,), 0.2), ((1, 0), 0.5)]
    assert roster_menu(prior, "code", ["c", "a"]) == [((1,), 0.2), ((0, 1), 0.3)]
    assert roster_menu(prior, "math", ["a", "b"]) == []


def test_the_menu_takes_solve_and_verify_shapes_only():
    SftConfig(worker_prior="workflow_reward", shapes={"solve": 1.0, "verify": 1.0, "plan": 0.0})
    with pytest.raises(ValueError, match="solve and verify workflows only; sft.shapes also weighs aggregate"):
        SftConfig(worker_prior="workflow_reward", shapes={"solve": 1.0, "aggregate": 1.0})


def test_a_warm_start_made_without_the_menu_is_not_reused_as_if_it_had_one(tmp_path):
    """A run directory left by another recipe (an SFT policy with no workflow_prior.json) must not pass for
    the measured warm start: the run stops and says what to delete."""
    (tmp_path / "old" / "sft").mkdir(parents=True)
    (tmp_path / "old" / "sft" / "config.json").write_text("{}")
    config = load_config("configs/train-paper7.yaml", [f"output.dir={tmp_path}", "run_name=old"])
    with pytest.raises(ValueError, match="not made with sft.worker_prior=workflow_reward"):
        warm_start_policy(config, RunOutput(str(tmp_path), "old"), [], Console(quiet=True))


@pytest.mark.slow
def test_the_warm_start_measures_the_menu_through_the_pool_and_teaches_it(tmp_path, shared_data):
    """On paper-7's training questions a check by another strong worker adds to the best single answer and a
    worker checking itself adds nothing (conductor/simulator/oracle.py): with tokens unpriced the measured
    menu must put a pair of two different workers first in math and weigh a self-check as the worker
    alone, and the warm start must record the menu beside its policy."""
    policy, _, menu, spent = measured_warm_start(tmp_path, shared_data, "menu", [
        "sft.worker_prior=workflow_reward", "sft.prior_questions=60", "sft.prior_top_workers=2",
        "sft.prior_temperature=0.02", "sft.shapes={solve: 1, verify: 1}",
        "reward.cost_penalty_per_1k_worker_tokens=0", "reward.cost_penalty_per_usd=0"], "workflow_prior.json")
    assert policy.endswith("sft") and set(menu) == {"code", "math500", "mmlu"}
    assert spent["sim"] > 0  # the menu's calls are reported, for the run's ledger and spend cap
    for items in menu.values():
        assert sum(items.values()) == pytest.approx(1)
        assert len(items) == 7 + 4  # every worker alone, and the 2 x 2 pairs of the two best
    best = max(menu["math500"], key=menu["math500"].get)
    solver, checker = best.split(">")
    assert solver != checker
    self_checks = [name for name in menu["math500"] if name.count(">") and len(set(name.split(">"))) == 1]
    assert len(self_checks) == 2
    for name in self_checks:  # the same answers as the worker alone, so the same reward and weight
        assert menu["math500"][name] == pytest.approx(menu["math500"][name.split(">")[0]])
