"""How a run picks the checkpoint it keeps (cluster/best_checkpoint.py): the validation figure averaged over
questions or domains, a token budget as a constraint, and a validation that left a domain unscored."""

import pytest

from cluster.train_state import TrainState
from conductor.config_loader import ConfigError, load_config


def test_validation_can_score_the_mean_over_domains_as_the_report_does():
    from cluster.best_checkpoint import not_eligible, selection_basis, validation_score
    from conductor.rollout_record import RolloutRecord
    from conductor.rollout_summary import summarise

    def rec(i, domain, correct, infra=None):
        reward = None if infra else (1.0 if correct else 0.0)
        return RolloutRecord(f"r{i}", f"g{i}", f"q{i}", 1, [1], [2], [0.0], "", True, correct, reward,
                             domain=domain, infra_error=infra)

    # nine math questions right, the one code question wrong: pooled 0.9, over domains 0.5
    records = [rec(i, "math500", True) for i in range(9)] + [rec(9, "code", False), rec(10, "code", True, "down")]
    stats = summarise(records)
    assert stats.accuracy == pytest.approx(0.9) and stats.domain_accuracy == pytest.approx(0.5)
    assert stats.domain_reward == pytest.approx(0.5)  # the infrastructure error is not scored
    pooled, by_domain = load_config(None, ["train.best_by=accuracy"]), load_config(
        None, ["train.best_by=accuracy", "train.val_average=domains"])
    assert validation_score(stats, pooled.train) == pytest.approx(0.9)
    assert validation_score(stats, by_domain.train) == pytest.approx(0.5)
    assert validation_score(stats, load_config(None, ["train.val_average=domains"]).train) == pytest.approx(0.5)
    assert selection_basis(pooled) != selection_basis(by_domain)  # a resumed run re-picks its best
    assert summarise([rec(0, "math500", True)]).domain_accuracy == 1.0

    # a domain none of whose questions could be scored (its sandbox or provider down) is in no figure: the
    # figures are over the other domains, higher than any comparable one, so that policy is not kept
    outage = summarise([rec(i, "math500", True) for i in range(9)] + [rec(9, "code", False, "down")])
    assert outage.unscored_domains == 1 and outage.domain_accuracy == 1.0 and stats.unscored_domains == 0
    for config in (pooled, by_domain):
        assert validation_score(outage, config.train) == float("-inf")
    assert "1 domain(s) with no question scored" in not_eligible(outage, by_domain.train)

    # summary.json's best_val_* are the kept checkpoint's figures on the basis it was chosen on
    from cluster.best_checkpoint import validation_row
    from cluster.train_report import best_validation

    state = TrainState()
    state.evals, state.best_step, state.best_val = [validation_row(20, stats)], 20, 0.5
    assert best_validation(state, by_domain.train)["best_val_accuracy"] == pytest.approx(0.5)
    assert best_validation(state, pooled.train)["best_val_accuracy"] == pytest.approx(0.9)
    state.best_step = -1  # nothing kept: no figure, not the score the loop started from
    assert set(best_validation(state, by_domain.train).values()) == {None}


def test_a_token_budget_constrains_the_choice_measured_as_the_report_does():
    from cluster.best_checkpoint import selection_basis, validation_sampling, validation_score, within_budget
    from conductor.rollout_record import RolloutRecord
    from conductor.rollout_summary import summarise
    from conductor.simulator.presets import load_preset, simulated_pool_config
    from conductor.workflow_constraint import matches

    def rec(i, domain, tokens):
        return RolloutRecord(f"r{i}", f"g{i}", f"q{i}", 1, [1], [2], [0.0], "", True, True, 1.0, domain=domain,
                             steps=[{"tokens_in": tokens - 100, "tokens_out": 100}])

    # nine math questions at 3,000 worker tokens, one code question at 1,000: pooled 2,800, over domains 2,000
    stats = summarise([rec(i, "math500", 3000) for i in range(9)] + [rec(9, "code", 1000)])
    assert stats.worker_tokens_per_rollout == pytest.approx(2800) and stats.domain_worker_tokens == pytest.approx(2000)
    budget = ["train.best_by=accuracy", "train.val_max_worker_tokens=2500"]
    pooled = load_config(None, budget)
    by_domain = load_config(None, [*budget, "train.val_average=domains"])
    assert not within_budget(stats, pooled.train) and validation_score(stats, pooled.train) == float("-inf")
    assert within_budget(stats, by_domain.train) and validation_score(stats, by_domain.train) == pytest.approx(1.0)
    unbounded = load_config(None, ["train.best_by=accuracy"])
    assert validation_score(stats, unbounded.train) == pytest.approx(1.0)
    # a budget or constrained decoding changes what a score means: a resumed run re-picks its best
    constrained = load_config(None, ["train.best_by=accuracy", "train.val_constrain_format=true"])
    assert len({selection_basis(unbounded), selection_basis(pooled), selection_basis(constrained)}) == 3
    with pytest.raises(ConfigError, match="val_max_worker_tokens"):
        load_config(None, ["train.val_max_worker_tokens=0"])

    # validation decodes under the workflow expression only when asked, over the pool's workers
    preset = load_preset(unbounded.simulator)
    pool = simulated_pool_config(preset, "http://127.0.0.1:1/v1")
    assert validation_sampling(unbounded.model_copy(update={"pool": pool})).format_regex is None
    sampling = validation_sampling(constrained.model_copy(update={"pool": pool}))
    assert sampling.temperature == constrained.train.eval_temperature
    one_step = 'model_id = [{}]\nsubtasks = ["solve it"]\naccess_list = [[]]'
    assert matches(sampling.format_regex, one_step.format(len(pool.workers) - 1))
    assert not matches(sampling.format_regex, one_step.format(len(pool.workers)))  # no such worker
