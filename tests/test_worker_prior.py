"""The SFT warm start's domain prior: the softmax over measured mean rewards, the even draw of questions
per domain, a roster's weights, and the warm start measuring it through the real simulator server (HTTP,
the official client in the pool) and teaching the examples it draws."""

import math

import pytest

from conductor.tasks.task import Task
from conductor.worker_prior import prior_tasks, random_prior, roster_weights, softmax_prior
from tests.support.measured_warm_start import measured_warm_start


def test_the_prior_is_a_softmax_of_each_domains_mean_rewards():
    prior = softmax_prior({"code": {"a": 0.7, "b": 0.4, "c": 0.4}, "math": {"a": 0.5, "b": 0.5}}, temperature=0.1)
    assert prior["code"]["a"] / prior["code"]["b"] == pytest.approx(math.exp(3))
    assert prior["code"]["b"] == prior["code"]["c"]
    assert prior["math"] == {"a": 0.5, "b": 0.5}
    assert all(sum(weights.values()) == pytest.approx(1) for weights in prior.values())
    cold = softmax_prior({"code": {"a": 0.7, "b": 0.4}}, temperature=0.01)["code"]
    assert cold["a"] > 0.999  # -> the best worker alone, no overflow
    with pytest.raises(ValueError, match="prior_temperature"):
        softmax_prior({"code": {"a": 1.0}}, temperature=0)


def test_a_random_prior_is_seeded_per_domain_and_measures_nothing():
    workers = [f"w{i}" for i in range(7)]
    prior = random_prior(["math", "code"], workers, temperature=0.2, seed=3)
    assert prior == random_prior(["code", "math"], workers, temperature=0.2, seed=3)  # the seed decides, not the order
    assert prior != random_prior(["code", "math"], workers, temperature=0.2, seed=4)
    assert prior["code"] != prior["math"]
    assert all(sum(weights.values()) == pytest.approx(1) and set(weights) == set(workers) for weights in prior.values())
    flat = random_prior(["code"], workers, temperature=100.0, seed=3)["code"]
    assert max(flat.values()) - min(flat.values()) < 0.01  # hot: near the uniform draw


def test_a_rosters_weights_follow_its_shown_order():
    prior = {"code": {"a": 0.6, "b": 0.3, "c": 0.1}}
    assert roster_weights(prior, "code", ["c", "a"]) == [0.1, 0.6]
    assert roster_weights(prior, "code", ["a", "new"]) == [0.6, 0.1]  # unmeasured: the domain's floor
    assert roster_weights(prior, "math", ["a", "b"]) == [1.0, 1.0]  # unmeasured domain: uniform


def test_prior_questions_are_drawn_evenly_per_domain():
    tasks = [Task(id=f"{d}{i}", domain=d, prompt="q", answer="1", verifier="exact")
             for d, n in (("code", 3), ("math", 50), ("mmlu", 20)) for i in range(n)]
    chosen = prior_tasks(tasks, 10, seed=1)
    counts = {d: sum(t.domain == d for t in chosen) for d in ("code", "math", "mmlu")}
    assert counts == {"code": 3, "math": 10, "mmlu": 10}
    assert chosen == prior_tasks(tasks, 10, seed=1) and len({t.id for t in chosen}) == 23
    assert {t.id for t in prior_tasks(tasks, 10, seed=2)} != {t.id for t in chosen}  # a seeded draw, not a prefix


@pytest.mark.slow
def test_the_warm_start_measures_the_prior_through_the_pool_and_teaches_it(tmp_path, shared_data):
    """On paper-7's training split gpt-5 is the best worker alone on code (0.53 against gemini's 0.43 over
    all its code questions; 68 against 38 on held-out): the measured prior must rank it first there, and
    the warm start must record the prior beside its policy."""
    policy, config, prior, spent = measured_warm_start(tmp_path, shared_data, "prior", [
        "sft.worker_prior=domain_reward", "sft.prior_questions=60"], "worker_prior.json")
    assert policy.endswith("sft") and set(prior) == {"code", "math500", "mmlu"}
    assert spent["sim"] > 0  # the measurement's calls are reported, for the run's ledger and spend cap
    workers = {w.id for w in config.pool.workers}
    for weights in prior.values():
        assert set(weights) == workers and sum(weights.values()) == pytest.approx(1)
    assert max(prior["code"], key=prior["code"].get) == "gpt-5"
    assert max(prior["code"].values()) > 0.4  # T=0.1 over a 10-point lead: e^1 the runner-up's weight


def test_a_random_prior_warm_start_with_a_kind_line_writes_its_seeded_prior(tmp_path, shared_data):
    """``sft.worker_prior: random`` with ``sft.plan: kind`` through the real warm start: the prior written
    beside the policy is the seeded random one (nothing measured), under its own file name."""
    policy, config, prior, spent = measured_warm_start(tmp_path, shared_data, "random", [
        "sft.worker_prior=random", "sft.plan=kind", "sft.prior_temperature=0.25"], "random_prior.json")
    assert policy.endswith("sft") and not (tmp_path / "random" / "sft" / "worker_prior.json").exists()
    assert spent == {}  # nothing measured, nothing spent
    expected = random_prior({"code", "math500", "mmlu"}, [w.id for w in config.pool.workers], 0.25, config.seed)
    assert set(prior) == set(expected) and all(prior[d] == pytest.approx(expected[d]) for d in expected)
