import functools

from conductor.config import RewardConfig
from conductor.rewards import reward as reward_of

reward = functools.partial(reward_of, worker_tokens=0)  # the worker-token penalty has its own test below


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


def test_a_costly_well_formed_episode_never_scores_below_a_format_error():
    settings = RewardConfig(format_error=0, wrong=0, correct=1, cost_penalty_per_usd=2)
    unparseable = reward(format_ok=False, correct=False, cost_usd=0, infra_error=False, settings=settings)
    expensive_wrong = reward(format_ok=True, correct=False, cost_usd=0.05, infra_error=False, settings=settings)
    assert expensive_wrong == unparseable == 0
    assert reward(format_ok=True, correct=True, cost_usd=0.05, infra_error=False, settings=settings) == 0.9


def test_rewards_out_of_order_are_refused():
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="format_error <= wrong < correct"):
        RewardConfig(format_error=0.5, wrong=0.0)


def test_worker_token_penalty_adds_to_the_usd_penalty_and_keeps_the_floor():
    settings = RewardConfig(format_error=0, wrong=0, correct=1, cost_penalty_per_usd=2,
                            cost_penalty_per_1k_worker_tokens=0.1)
    score = reward(format_ok=True, correct=True, cost_usd=0.05, worker_tokens=2_000, infra_error=False,
                   settings=settings)
    assert abs(score - (1 - 0.1 - 0.2)) < 1e-12
    assert reward(format_ok=True, correct=True, cost_usd=0, worker_tokens=50_000, infra_error=False,
                  settings=settings) == 0


def test_token_penalty_charges_only_the_tokens_above_the_free_budget():
    settings = RewardConfig(format_error=0, wrong=0.5, correct=1, cost_penalty_per_1k_worker_tokens=0.1,
                            penalty_free_worker_tokens=2_000)
    scores = {tokens: reward(format_ok=True, correct=True, cost_usd=0, worker_tokens=tokens, infra_error=False,
                             settings=settings) for tokens in (600, 2_000, 3_000)}
    assert scores[600] == scores[2_000] == 1.0
    assert abs(scores[3_000] - 0.9) < 1e-12
    wrong_inside = reward(format_ok=True, correct=False, cost_usd=0, worker_tokens=1_900, infra_error=False,
                          settings=settings)
    assert wrong_inside == 0.5


def test_episode_worker_tokens_count_every_step_in_and_out():
    from conductor.episode import EpisodeResult
    from conductor.trace import RoundTrace, StepTrace

    steps = [StepTrace(round=0, index=0, shown_worker=0, worker_id="a", subtask="s", access=(), visible=(),
                       tokens_in=10, tokens_out=20),
             StepTrace(round=0, index=1, shown_worker=1, worker_id="b", subtask="s", access=(0,), visible=(0,),
                       tokens_in=30, tokens_out=40)]
    episode = EpisodeResult(rounds=[RoundTrace(round=0, conductor_text="", steps=steps)])
    assert episode.worker_tokens == 100
