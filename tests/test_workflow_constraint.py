"""The decoding constraint against the parser: every valid canonical workflow matches it, and nothing it
matches is rejected by the parser (checked on seeded random edits of valid workflows)."""

import random

import pytest

from conductor.example_workflows import SHAPES, random_workflow
from conductor.workflow import ALL, Step, Workflow, WorkflowParseError, parse_workflow
from conductor.workflow_constraint import MAX_PLAN_LINE_CHARS, matches, workflow_regex

WORKERS, MAX_STEPS = 7, 5


def _random_workflow(rng: random.Random) -> Workflow:
    steps = []
    for index in range(rng.randint(1, MAX_STEPS)):
        kind = rng.random()
        earlier = sorted(rng.sample(range(index), rng.randint(1, index))) if index else []
        access = ALL if kind < 0.3 else (() if kind < 0.5 or not earlier else tuple(earlier))
        subtask = rng.choice(["Solve the question.", 'Say "why" \\ then answer.', "Check it.\nTwice.", "é 答"])
        steps.append(Step(rng.randrange(WORKERS), subtask, access))
    return Workflow(tuple(steps))


def _valid_texts(count: int = 300) -> list[str]:
    rng = random.Random(0)
    texts = [random_workflow({s: 1.0 for s in SHAPES}, WORKERS, rng).render() for _ in range(count // 2)]
    return texts + [_random_workflow(rng).render() for _ in range(count - len(texts))]


def test_every_valid_workflow_matches():
    expression = workflow_regex(WORKERS, MAX_STEPS, plan=True)
    for text in _valid_texts():
        assert matches(expression, text), text
        assert matches(expression, "I will solve, then check.\nStep two checks.\n" + text)
    text = _valid_texts(1)[0]
    assert matches(workflow_regex(WORKERS, MAX_STEPS), "The question asks: Reverse the word\n" + text)
    assert not matches(workflow_regex(WORKERS, MAX_STEPS), "One plan line.\nAnd a second.\n" + text)
    assert not matches(workflow_regex(WORKERS, MAX_STEPS), "x" * (MAX_PLAN_LINE_CHARS + 1) + "\n" + text)
    assert not matches(workflow_regex(WORKERS, MAX_STEPS, plan_line_chars=0), "A plan.\n" + text)


def test_the_papers_failures_and_rule_breaks_do_not_match():
    expression = workflow_regex(WORKERS, MAX_STEPS, plan=True)
    solve, check = '"Solve the question."', '"Check the answer above."'
    for text in [
        f"model_id = [[], [[], [1]\nsubtasks = [{solve}]\naccess_list = [[]]",  # a held-out greedy failure
        f"model_id = [1, 0]\nsubtasks = [{solve}]\naccess_list = [[], [0]]",  # lengths differ
        f"model_id = [7]\nsubtasks = [{solve}]\naccess_list = [[]]",  # no worker 7
        'model_id = [1]\nsubtasks = [" "]\naccess_list = [[]]',  # blank subtask
        f"model_id = [1, 0]\nsubtasks = [{solve}, {check}]\naccess_list = [[], [1]]",  # self-reference
        f"model_id = [1, 0]\nsubtasks = [{solve}, {check}]\naccess_list = [[1], []]",  # forward reference
        "model_id = [1, 0, 2, 3, 4, 5]\nsubtasks = [" + ", ".join([solve] * 6) + "]\naccess_list = ["
        + ", ".join(["[]"] * 6) + "]",  # more than max_steps
        "model_id = []\nsubtasks = []\naccess_list = []",  # accepting is for recursive rounds only
    ]:
        assert not matches(expression, text), text
    assert matches(workflow_regex(WORKERS, MAX_STEPS, recursive_round=True, plan=True),
                   "model_id = []\nsubtasks = []\naccess_list = []")


def test_nothing_the_constraint_admits_is_rejected_by_the_parser():
    """Soundness: seeded single-character edits of valid workflows; each edit the expression still
    matches must parse."""
    rng = random.Random(1)
    expression = workflow_regex(WORKERS, MAX_STEPS, plan=True)
    alphabet = '0123456789[]", \\\nallnx\r\x00\x1c\x85\xa0\u2028\u3000'
    admitted = 0
    for text in _valid_texts(200):
        for _ in range(40):
            i = rng.randrange(len(text))
            edited = text[:i] + rng.choice([rng.choice(alphabet), ""]) + text[i + rng.randint(0, 1):]
            if matches(expression, edited):
                admitted += 1
                try:
                    parse_workflow(edited, num_workers=WORKERS, max_steps=MAX_STEPS)
                except WorkflowParseError as exc:
                    pytest.fail(f"admitted but unparsable ({exc}): {edited!r}")
    assert admitted > 500  # the edits reach the subtasks and the indices, not only the syntax


@pytest.mark.parametrize("inner", ["a\rb", "\x00", "\x1c", "\x85", "\xa0", "\u2028", "\u3000", " \x1f"])
def test_a_subtask_of_blanks_or_raw_control_characters_is_not_admitted(inner):
    """The parser's blank test is str.strip() and its reader literal_eval (a raw CR or NUL ends the source):
    the expression spells both out rather than trust a grammar engine's \\s."""
    text = f'model_id = [0]\nsubtasks = ["{inner}"]\naccess_list = [[]]'
    assert not matches(workflow_regex(WORKERS, MAX_STEPS), text)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        workflow_regex(0, 3)
    with pytest.raises(ValueError):
        workflow_regex(7, 9)
