"""The evaluation's expected cost, printed before it starts for a paid pool (conductor/evaluation/
cost_estimate.py): each method's calls per question at the workers' prices, and nothing for a pool on
loopback (the simulator, a local server)."""

import pytest
from rich.console import Console

from cluster.evaluate import print_expected_cost
from conductor.config import Config
from conductor.evaluation.cost_estimate import ANSWER_TOKENS, PROMPT_OVERHEAD_TOKENS, estimate
from conductor.tasks.task import Task


def pool_config(base_url: str, **evaluate) -> Config:
    return Config.model_validate({
        "pool": {"providers": [{"id": "api", "base_url": base_url}],
                 "workers": [{"id": "a", "description": "cheap", "provider": "api", "price_in_per_m": 1.0,
                              "price_out_per_m": 2.0, "sampling": {"max_tokens": 1000}},
                             {"id": "b", "description": "dear", "provider": "api", "price_in_per_m": 3.0,
                              "price_out_per_m": 6.0, "sampling": {"max_tokens": 1000}}]},
        "evaluate": {"repeats": 2, **evaluate}})


TASKS = [Task(id=f"q{i}", domain="math", prompt="x" * 400, answer="1", verifier="math") for i in range(3)]


def call(price_in: float, price_out: float, earlier: int = 0, answer: int = ANSWER_TOKENS) -> float:
    return ((100 + PROMPT_OVERHEAD_TOKENS + earlier * answer) * price_in + answer * price_out) / 1e6


def test_each_method_is_priced_by_its_calls_per_question():
    config = pool_config("https://api.example.com/v1")
    single = estimate(config, ["single:b"], TASKS)
    assert single.calls == 3 * 2 and single.expected == pytest.approx(6 * call(3, 6))
    assert single.high == pytest.approx(6 * call(3, 6, answer=1000))
    # MoA: both workers alone, then the pool's mean worker reading their two answers; the oracle is derived
    moa = estimate(config, ["moa", "oracle"], TASKS)
    aggregate = (call(1, 2, earlier=2) + call(3, 6, earlier=2)) / 2
    assert moa.calls == 6 * 3 and moa.expected == pytest.approx(6 * (call(1, 2) + call(3, 6) + aggregate))
    reflect = estimate(config, ["self_reflection:a"], TASKS)  # 5 calls, each reading every earlier answer
    assert reflect.expected == pytest.approx(6 * sum(call(1, 2, earlier=i) for i in range(5)))


def test_the_routers_that_share_the_routing_table_are_priced_for_it_once():
    """router_dc and rllib_router learn from one table, every worker once on each train question: measured
    once between them, not once each (masrouter makes its own calls)."""
    config = pool_config("https://api.example.com/v1")
    train = [Task(id=f"t{i}", domain="math", prompt="x" * 400, answer="1", verifier="math") for i in range(5)]
    one, both = (estimate(config, methods, TASKS, train) for methods in (["router_dc"], ["router_dc", "rllib_router"]))
    assert one.calls == 3 * 2 + 5 * 2 and both.calls == one.calls + 3 * 2  # the second router's own answers only


def test_a_paid_pool_prints_its_expected_cost_and_a_loopback_one_does_not():
    for url, printed in (("https://api.example.com/v1", True), ("http://127.0.0.1:8000/v1", False)):
        console = Console(record=True, width=200)
        print_expected_cost(pool_config(url), console, ["single:a", "random"], TASKS, [])
        assert ("expected cost: about $" in console.export_text()) == printed, url
