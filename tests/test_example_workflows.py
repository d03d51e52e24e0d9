"""The SFT warm start's example workflows: every shape is a valid workflow the simulated orchestra reads
as intended, the menu is drawn by its weights, and a bad menu is a config error."""

import collections
import random

import pytest

from conductor.config import Config, SftConfig
from conductor.example_workflows import SHAPES, random_workflow, shape_steps, shape_workflow
from conductor.simulator.roles import Role, classify
from conductor.workflow import parse_workflow


@pytest.mark.parametrize("shape", SHAPES)
def test_every_shape_renders_to_a_workflow_that_parses_back(shape):
    workflow = shape_workflow(shape, [3, 1, 2])
    assert parse_workflow(workflow.render(), num_workers=4, max_steps=5) == workflow
    assert len(workflow.steps) == shape_steps(shape)


def visible_answers(workflow, index):
    """Earlier steps in view whose subtask asked for an answer (a plan is not one)."""
    return sum(classify(workflow.steps[i].subtask, 0) is not Role.PLAN
               for i in workflow.steps[index].visible_steps(index))


@pytest.mark.parametrize("shape, roles", [
    ("solve", [Role.SOLVE]),
    ("verify", [Role.SOLVE, Role.VERIFY]),
    ("verify_chain", [Role.SOLVE, Role.VERIFY, Role.VERIFY]),
    ("aggregate", [Role.SOLVE, Role.SOLVE, Role.AGGREGATE]),
    ("plan", [Role.PLAN, Role.SOLVE]),
])
def test_the_orchestra_reads_each_shape_as_its_name_says(shape, roles):
    workflow = shape_workflow(shape, [0, 1, 2])
    assert [classify(s.subtask, visible_answers(workflow, i)) for i, s in enumerate(workflow.steps)] == roles


def test_shapes_are_drawn_by_weight_with_uniform_workers():
    rng = random.Random(0)
    drawn = [random_workflow({"solve": 3, "verify": 1}, 7, rng) for _ in range(4000)]
    steps = collections.Counter(len(w.steps) for w in drawn)
    assert 0.70 < steps[1] / 4000 < 0.80
    workers = collections.Counter(s.worker for w in drawn for s in w.steps)
    assert set(workers) == set(range(7)) and max(workers.values()) / min(workers.values()) < 1.3


def test_a_solve_only_menu_draws_what_the_earlier_sampler_drew():
    """Seeded toy runs keep their examples: first worker, then one uniform, as before the menu existed."""
    rng, reference = random.Random(5), random.Random(5)
    for _ in range(50):
        workflow = random_workflow({"solve": 1.0}, 3, rng)
        worker = reference.randrange(3)
        reference.random()
        assert [s.worker for s in workflow.steps] == [worker]


def test_a_bad_menu_is_a_clear_config_error():
    with pytest.raises(ValueError, match="unknown shape"):
        SftConfig(shapes={"solve": 1.0, "debate": 1.0})
    with pytest.raises(ValueError, match="positive sum"):
        SftConfig(shapes={"solve": 0.0})
    with pytest.raises(ValueError, match="more steps than executor.max_steps"):
        Config(executor={"max_steps": 2}, sft={"shapes": {"verify_chain": 1.0}})
    Config(executor={"max_steps": 2}, sft={"steps": 0, "shapes": {"verify_chain": 1.0}})


def test_worker_weights_draw_the_workers_of_every_step():
    rng = random.Random(1)
    drawn = [random_workflow({"solve": 1, "verify": 1}, 3, rng, worker_weights=[0, 3, 1]) for _ in range(2000)]
    workers = collections.Counter(s.worker for w in drawn for s in w.steps)
    assert set(workers) == {1, 2} and 2.5 < workers[1] / workers[2] < 3.5
    with pytest.raises(ValueError, match="2 worker weights for 3 workers"):
        random_workflow({"solve": 1}, 3, rng, worker_weights=[1, 1])


def test_a_menu_item_is_drawn_by_weight_as_a_solve_or_a_verify_workflow():
    from conductor.example_workflows import menu_workflow

    rng = random.Random(2)
    drawn = collections.Counter(tuple(s.worker for s in menu_workflow([((4,), 1.0), ((1, 3), 3.0)], rng).steps)
                                for _ in range(2000))
    assert set(drawn) == {(4,), (1, 3)} and 2.5 < drawn[(1, 3)] / drawn[(4,)] < 3.5
    pair = menu_workflow([((1, 3), 1.0)], rng)
    assert pair == shape_workflow("verify", [1, 3])
    with pytest.raises(ValueError, match="empty workflow menu"):
        menu_workflow([], rng)
    with pytest.raises(ValueError, match="one \\(solve\\) or two \\(verify\\)"):
        menu_workflow([((0, 1, 2), 1.0)], rng)


def test_a_restating_plan_repeats_the_first_words_on_one_line_without_an_assignment():
    from conductor.example_workflows import restating_plan
    from conductor.workflow_constraint import matches, workflow_regex

    plan = restating_plan("Solve  x = 3\ny for y.\n\nEnd with 'Answer: '.", 4)
    assert plan == "The question asks: Solve x 3 y\n"
    assert matches(workflow_regex(3, 5, plan=True), plan + shape_workflow("solve", [1]).render())
    assert restating_plan("Sort 3, 1.", 9) == "The question asks: Sort 3, 1.\n"
    with pytest.raises(ValueError, match="at least one word"):
        restating_plan("Sort 3, 1.", 0)


def test_a_kind_plan_names_each_questions_domain_and_decodes_under_the_workflow_grammar():
    from conductor.example_workflows import example_plans, kind_plan
    from conductor.workflow_constraint import matches, workflow_regex

    plans = example_plans("kind", 3, ["Sort 3, 1.", "What is 2 + 2?"], kinds=["code", "math500"])
    assert plans == ["The question is of kind code.\n", "The question is of kind math500.\n"]
    assert matches(workflow_regex(3, 5, plan=True), plans[1] + shape_workflow("verify", [1, 2]).render())
    with pytest.raises(ValueError, match="one per question"):
        example_plans("kind", 3, ["Sort 3, 1."], kinds=None)
    with pytest.raises(ValueError, match="without '='"):
        kind_plan("a = b")
    assert SftConfig(plan="kind").plan == "kind"


def test_the_plan_setting_is_checked():
    assert SftConfig(plan="restate", plan_words=2).plan_words == 2
    with pytest.raises(ValueError):
        SftConfig(plan="summarise")
    with pytest.raises(ValueError):
        SftConfig(plan_words=0)
