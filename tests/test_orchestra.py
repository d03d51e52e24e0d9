"""The simulated orchestra's behaviour model (conductor/simulator/oracle.py, roles.py), checked on the
paper-7 preset in-process: each role does what its docstring says, at the configured rates."""

import asyncio
import random

import pytest

from conductor.config import SimulatorConfig
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.simulator.roles import Role, classify
from conductor.verifiers.answer_key import final_value, is_right
from conductor.workflow import ALL, Step, Workflow
from tests.support.direct_pool import DirectPool

SOLVE = "Solve the question and give the final answer."
VERIFY = "Check the answer above step by step. If anything is wrong, correct it and give the final answer."
AGGREGATE = "Several answers are above. Synthesize them into one final answer."
PLAN = "Outline a plan for this question. Do not solve it."


@pytest.fixture(scope="module")
def orchestra(shared_data):
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=300)
    preset = load_preset(config)
    return preset, Oracle(preset, config), config


def ask(task, subtask, turns=()):
    messages = []
    for user, assistant in turns:
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    messages.append({"role": "user", "content": subtask})
    messages[0] = {"role": "user", "content": f"Question:\n{task.prompt}\n\n{messages[0]['content']}"}
    return messages


@pytest.mark.parametrize("subtask, visible, role", [
    ("Solve the question and give the final answer in \\boxed{}.", 0, Role.SOLVE),
    ("Check the divisor list and the sum above. If anything is wrong, correct it.", 1, Role.VERIFY),
    ("Check the divisor list and the sum above.", 0, Role.SOLVE),  # nothing to check: it solves
    ("Review the implementation above for edge cases.", 1, Role.VERIFY),
    ("Two solutions are above. If they disagree, find the error. Give the final number.", 2, Role.AGGREGATE),
    ("Two solutions are above. If they disagree, find the error.", 1, Role.VERIFY),
    ("Synthesize these responses into a single, high-quality response.", 7, Role.AGGREGATE),
    ("Design an algorithm for the problem; do not write code yet.", 0, Role.PLAN),
    ("Outline your approach, then give the final answer in \\boxed{}.", 0, Role.SOLVE),
    ("Implement the algorithm above in a python block.", 1, Role.SOLVE),
])
def test_the_role_is_read_from_the_subtask(subtask, visible, role):
    assert classify(subtask, visible) is role


def items(preset, domain, count=300):
    return [t for t in preset.tasks if t.domain == domain][:count]


def test_alone_a_worker_answers_by_its_calibrated_skill(orchestra):
    preset, oracle, _ = orchestra
    for task in items(preset, "math500", 100):
        reply = oracle.answer("gpt-5", ask(task, SOLVE))
        assert reply.role is Role.SOLVE and reply.correct == oracle.base_correct[("gpt-5", task.id)]
        assert reply.reasoning_tokens > 0  # an API reasoning model bills hidden reasoning


def test_a_verifier_keeps_right_answers_fixes_what_it_can_and_never_its_own_mistakes(orchestra):
    preset, oracle, config = orchestra
    solver, checker = "claude-sonnet-4", "gemini-2.5-pro"
    fixed = fixable = 0
    for task in items(preset, "math500", 500):
        first = oracle.answer(solver, ask(task, SOLVE))
        checked = oracle.answer(checker, ask(task, VERIFY, [(SOLVE, first.text)]))
        assert checked.role is Role.VERIFY
        can = oracle.base_correct[(checker, task.id)]
        if first.correct and can:
            assert checked.correct
        if not first.correct and not can:
            assert not checked.correct  # no right answer out of nothing
        if not first.correct and can:
            fixable += 1
            fixed += checked.correct
        own = oracle.answer(checker, ask(task, VERIFY, [(SOLVE, oracle.answer(checker, ask(task, SOLVE)).text)]))
        assert own.correct == can  # checking your own answer changes nothing
    assert fixable >= 20
    assert fixed / fixable == pytest.approx(config.verify_fix, abs=0.15)


def test_an_aggregator_that_cannot_solve_follows_the_majority_at_the_configured_rate(orchestra):
    preset, oracle, config = orchestra
    names = [w.name for w in preset.workers]
    followed = cases = 0
    for task in items(preset, "math500", 500):
        proposals = [(SOLVE, oracle.answer(name, ask(task, SOLVE)).text) for name in names]
        reply = oracle.answer("gemma-3-27b", ask(task, AGGREGATE, proposals))
        assert reply.role is Role.AGGREGATE
        right = sum(oracle.base_correct[(name, task.id)] for name in names)
        if not oracle.base_correct[("gemma-3-27b", task.id)] and right >= 5:  # the majority is right
            cases += 1
            followed += reply.correct
        if right == 0:
            assert not reply.correct
    assert cases >= 50
    assert followed / cases == pytest.approx(config.aggregate_follow, abs=0.15)


def test_a_plan_states_no_answer_and_a_right_one_lifts_the_implementer(orchestra):
    preset, oracle, config = orchestra
    lifted = cases = 0
    for task in items(preset, "code", 164):
        plan = oracle.answer("gpt-5", ask(task, PLAN))
        assert plan.role is Role.PLAN and plan.correct is None and final_value(task, plan.text) is None
        built = oracle.answer("claude-sonnet-4", ask(task, "Implement the plan above in a python block.",
                                                     [(PLAN, plan.text)]))
        planner, builder = (oracle.base_correct[(w, task.id)] for w in ("gpt-5", "claude-sonnet-4"))
        if planner and not builder:
            cases += 1
            lifted += built.correct
        if not planner and not builder:
            assert not built.correct
    assert cases >= 15
    assert lifted / cases == pytest.approx(config.plan_follow, abs=0.25)


def test_a_seed_asks_for_an_independent_sample(orchestra):
    preset, oracle, _ = orchestra
    tasks = items(preset, "math500", 200)
    again = [oracle.answer("gpt-5", ask(t, SOLVE), 3).text for t in tasks]
    assert again == [oracle.answer("gpt-5", ask(t, SOLVE), 3).text for t in tasks]
    other = [oracle.answer("gpt-5", ask(t, SOLVE), 4).correct for t in tasks]
    base = [oracle.base_correct[("gpt-5", t.id)] for t in tasks]
    assert other != base and abs(sum(other) - sum(base)) <= 20  # some items flip; the skill stays


def test_no_workflow_is_right_unless_one_of_its_workers_could_solve_the_item(orchestra):
    preset, oracle, _ = orchestra
    pool_spec = simulated_pool_config(preset, "http://127.0.0.1:9/v1")
    roster = Roster.full(pool_spec.workers)
    executor = WorkflowExecutor(DirectPool(oracle))
    rng = random.Random(0)
    subtasks = [SOLVE, VERIFY, AGGREGATE, PLAN, "Implement the plan above."]
    tasks = [t for d in ("math500", "mmlu", "code") for t in items(preset, d, 60)]

    async def main():
        seen_right = 0
        for task in tasks:
            steps = []
            for index in range(rng.randint(1, 4)):
                earlier = list(range(index))
                access = ALL if earlier and rng.random() < 0.3 else tuple(sorted(rng.sample(earlier, rng.randint(
                    0, len(earlier)))))
                steps.append(Step(rng.randrange(len(roster)), rng.choice(subtasks), access))
            result = await executor.execute(Workflow(tuple(steps)), task.prompt, roster)
            value = final_value(task, result.answer)
            if value is not None and is_right(task, value):
                seen_right += 1
                assert any(oracle.base_correct[(roster.worker_id(s.worker), task.id)] for s in steps)
        return seen_right

    assert asyncio.run(main()) > 20
