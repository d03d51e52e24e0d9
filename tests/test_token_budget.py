"""The token budget's multiplier (conductor/token_budget.py): rewards priced at the current lambda, and
lambda's dual step measured as the report measures tokens."""

import pytest

from conductor.config import RewardConfig
from conductor.config_loader import ConfigError, load_config
from conductor.rewards import reward
from conductor.rollout_record import RolloutRecord
from conductor.token_budget import TokenBudget


def rec(i, domain, tokens, correct=True, format_ok=True, infra=None):
    settings = RewardConfig(wrong=0.0, cost_penalty_per_1k_worker_tokens=0.03)
    r = reward(format_ok=format_ok, correct=correct, cost_usd=0.0, worker_tokens=tokens, infra_error=infra is not None,
               settings=settings)
    return RolloutRecord(f"r{i}", "g", f"q{i}", 1, [1], [2], [0.0], "", format_ok, correct, r, domain=domain,
                         infra_error=infra, steps=[{"tokens_in": tokens - 50, "tokens_out": 50}])


def settings(**kw):
    return RewardConfig(wrong=0.0, cost_penalty_per_1k_worker_tokens=0.03, worker_token_budget=2000, **kw)


def test_no_budget_no_multiplier_and_a_resumed_run_keeps_its_own():
    assert TokenBudget.of(RewardConfig(cost_penalty_per_1k_worker_tokens=0.03)) is None
    assert TokenBudget.of(settings()).multiplier == 0.03           # lambda_0: the configured price
    assert TokenBudget.of(settings(), multiplier=0.2).multiplier == 0.2


def test_rewards_are_priced_at_the_current_multiplier_with_the_floor_and_infra_errors_kept():
    budget = TokenBudget.of(settings(), multiplier=0.1)
    records = [rec(0, "math", 3000), rec(1, "math", 1000, correct=False), rec(2, "code", 9000),
               rec(3, "code", 500, format_ok=False), rec(4, "code", 800, infra="worker down")]
    assert [r.reward for r in records[:3]] == pytest.approx([1 - 0.09, 0.0, 1 - 0.27])  # priced by the actors
    priced = budget.reprice(records)
    assert [r.reward for r in priced] == pytest.approx([1 - 0.3, 0.0, 1 - 0.9, 0.0, None])
    assert priced[4].reward is None                                   # unscored stays unscored
    assert [r.rollout_id for r in priced] == [r.rollout_id for r in records]
    dear = TokenBudget.of(settings(), multiplier=2.0)
    assert dear.reprice(records[2:3])[0].reward == 0.0  # never under a format error


def test_the_multiplier_rises_over_budget_falls_under_it_and_stays_within_bounds():
    budget = TokenBudget.of(settings(budget_multiplier_rate=0.05, budget_multiplier_max=0.2))
    # nine math questions at 1,000 tokens, one code question at 5,000: pooled 1,400, over domains 3,000
    over = [rec(i, "math", 1000) for i in range(9)] + [rec(9, "code", 5000)]
    assert budget.update(over) == pytest.approx(3000)                # the report's per-domain average
    assert budget.multiplier == pytest.approx(0.03 + 0.05 * 1.0)
    for _ in range(10):
        budget.update(over)
    assert budget.multiplier == 0.2                                  # the ceiling
    under = [rec(i, "math", 500) for i in range(4)]
    for _ in range(20):
        budget.update(under)
    assert budget.multiplier == 0.0                                  # never a reward for spending


def test_an_episode_stopped_by_an_infrastructure_error_does_not_move_the_multiplier():
    """It stopped partway: its few tokens say nothing of what the policy spends."""
    budget = TokenBudget.of(settings(budget_multiplier_rate=0.05))
    assert budget.update([rec(0, "math", 2000), rec(1, "code", 100, infra="worker down")]) == pytest.approx(2000)
    assert budget.multiplier == pytest.approx(0.03)
    assert budget.update([rec(2, "code", 100, infra="worker down")]) == 0.0 and budget.multiplier == pytest.approx(0.03)


def test_bad_budget_settings_are_refused_with_their_path():
    for bad in ("reward.worker_token_budget=0", "reward.budget_multiplier_rate=-1", "reward.budget_multiplier_max=0"):
        with pytest.raises(ConfigError, match=bad.split("=")[0].split(".")[1]):
            load_config(None, [bad])
