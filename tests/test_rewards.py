from conductor.config import RewardConfig
from conductor.rewards import reward


def test_default_reward_levels():
    assert reward(format_ok=False, correct=False, cost_usd=0, infra_error=False) == 0.0
    assert reward(format_ok=True, correct=False, cost_usd=0, infra_error=False) == 0.5
    assert reward(format_ok=True, correct=True, cost_usd=0, infra_error=False) == 1.0


def test_infra_errors_are_not_scored():
    assert reward(format_ok=True, correct=False, cost_usd=0, infra_error=True) is None


def test_configured_values_and_cost_penalty():
    settings = RewardConfig(format_error=-1, wrong=0, correct=2, cost_penalty_per_usd=10)
    assert reward(format_ok=True, correct=True, cost_usd=0.05, infra_error=False, settings=settings) == 1.5
    assert reward(format_ok=False, correct=True, cost_usd=0.05, infra_error=False, settings=settings) == -1
