"""The per-domain table baseline (conductor/baselines.py): each domain's questions to the worker right on most
of them, counted over the questions every worker had scored."""

import pytest

from conductor.baselines import domain_table_accuracy
from conductor.rollout_record import RolloutRecord


def outcome(question: str, domain: str, correct: bool, infra: bool = False) -> RolloutRecord:
    return RolloutRecord(rollout_id=question, group_id=question, question_id=question, policy_version=-1,
                         prompt_token_ids=[], completion_token_ids=[], completion_logprobs=[], completion_text="",
                         format_ok=True, correct=correct, reward=None if infra else float(correct), domain=domain,
                         infra_error="outage" if infra else None)


def test_each_domain_goes_to_its_best_worker():
    # a: right on both math questions and one of three code ones; b: one math, all three code.
    a = [outcome("m1", "math", True), outcome("m2", "math", True),
         outcome("c1", "code", True), outcome("c2", "code", False), outcome("c3", "code", False)]
    b = [outcome("m1", "math", False), outcome("m2", "math", True),
         outcome("c1", "code", True), outcome("c2", "code", True), outcome("c3", "code", True)]
    assert domain_table_accuracy({"a": a, "b": b}) == pytest.approx(5 / 5)
    assert domain_table_accuracy({"a": a}) == pytest.approx(3 / 5)  # one worker: the table is that worker


def test_a_question_some_worker_could_not_score_is_left_out():
    a = [outcome("m1", "math", True), outcome("m2", "math", False)]
    b = [outcome("m1", "math", False), outcome("m2", "math", True, infra=True)]
    assert domain_table_accuracy({"a": a, "b": b}) == pytest.approx(1.0)  # m1 alone, which a got right
    assert domain_table_accuracy({}) == 0.0
