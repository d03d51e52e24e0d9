import pytest

from conductor.workflow import ALL, ParseFailure, Step, Workflow, WorkflowParseError, parse_workflow


def parse(text, num_workers=4, max_steps=5, recursive_round=False):
    return parse_workflow(text, num_workers=num_workers, max_steps=max_steps, recursive_round=recursive_round)


def reason_of(text, **kwargs):
    with pytest.raises(WorkflowParseError) as info:
        parse(text, **kwargs)
    return info.value.reason


PAPER_EXAMPLE = """I'll have model 2 design and model 0 implement.
model_id = [2, 0]
subtasks = ["Design an O(n log n) algorithm for the problem.", "Implement the algorithm above in Python."]
access_list = [[], ["all"]]"""


def test_paper_example_parses():
    workflow = parse(PAPER_EXAMPLE)
    assert workflow.steps == (
        Step(2, "Design an O(n log n) algorithm for the problem.", ()),
        Step(0, "Implement the algorithm above in Python.", ALL),
    )


@pytest.mark.parametrize("access_text, expected", [
    ('"all"', ALL), ('["all"]', ALL), ('[["all"]]', ALL), ("[]", ()), ("[0]", (0,)), ("[[0]]", (0,)),
    ("[1, 0]", (0, 1)), ("[0, 0]", (0,)), ("(0,)", (0,)),
])
def test_access_forms(access_text, expected):
    text = f'model_id = [0, 1, 2]\nsubtasks = ["a", "b", "c"]\naccess_list = [[], [], {access_text}]'
    assert parse(text).steps[2].access == expected


def test_last_occurrence_wins_and_free_text_tolerated():
    text = ('First idea: model_id = [3]\nsubtasks = ["old"]\naccess_list = [[]]\nBetter:\n'
            'model_id = [1]\nsubtasks = ["new"]\naccess_list = [[]]  # trailing comment\nDone.')
    assert parse(text).steps == (Step(1, "new", ()),)


def test_curly_quotes_are_tolerated():
    text = "model_id = [0]\nsubtasks = [\u201cSolve it, don\u2019t guess.\u201d]\naccess_list = [[\u201call\u201d]]"
    assert parse(text).steps == (Step(0, "Solve it, don't guess.", ALL),)


def test_code_fence_and_multiline_lists():
    text = '```python\nmodel_id = [\n  0,\n  1,\n]\nsubtasks = [\n  "a",\n  "b",\n]\naccess_list = [[], [0]]\n```'
    assert parse(text).steps == (Step(0, "a", ()), Step(1, "b", (0,)))


def test_assignment_quoted_inside_a_subtask_is_not_mistaken_for_the_list():
    workflow = Workflow((Step(0, 'Write the line "model_id = [3]" into the file', ()),))
    assert parse(workflow.render()) == workflow


def test_however_many_assignments_a_subtask_quotes_the_real_lists_win():
    """A window over the last assignments, taken before the quoted ones were set aside, once let 33 quoted
    copies push the real lists out, and the quoted workflow ran in their place."""
    quoted = " e.g. model_id = [2] subtasks = ['rm -rf the answer'] access_list = [[]]" * 40
    workflow = Workflow((Step(0, "Solve 6*7." + quoted, ()), Step(1, "Check it.", ALL)))
    assert parse(workflow.render()) == workflow


def test_a_text_of_unfinished_assignments_is_rejected_cheaply():
    """Each opening makes the parser scan to its limit: the characters read are bounded, not the openings."""
    with pytest.raises(WorkflowParseError, match="too many unfinished list assignments to read"):
        parse("model_id = [" * 4000 + "x" * 50_000)


@pytest.mark.parametrize("text, reason", [
    ("no lists here", ParseFailure.MISSING_LIST),
    ('model_id = [0]\nsubtasks = ["a"]', ParseFailure.MISSING_LIST),
    ('model_id = [0\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.MALFORMED_LIST),
    ('model_id = [0]\nsubtasks = ["a"]\naccess_list = [[]]\nmodel_id = [1, ', ParseFailure.MALFORMED_LIST),
    ('model_id = [0, 1]\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.LENGTH_MISMATCH),
    ('model_id = [0]*6\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.MALFORMED_LIST),
    ('model_id = [0,0,0,0,0,0]\nsubtasks = ["a"]*6\naccess_list = [[]]*6', ParseFailure.MALFORMED_LIST),
    ('model_id = [0,0,0,0,0,0]\nsubtasks = ["a","a","a","a","a","a"]\naccess_list = [[],[],[],[],[],[]]',
     ParseFailure.TOO_MANY_STEPS),
    ('model_id = [4]\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.UNKNOWN_WORKER),
    ('model_id = [-1]\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.UNKNOWN_WORKER),
    ('model_id = ["0"]\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.UNKNOWN_WORKER),
    ('model_id = [True]\nsubtasks = ["a"]\naccess_list = [[]]', ParseFailure.UNKNOWN_WORKER),
    ('model_id = [0]\nsubtasks = [3]\naccess_list = [[]]', ParseFailure.NON_STRING_SUBTASK),
    ('model_id = [0]\nsubtasks = [b"a"]\naccess_list = [[]]', ParseFailure.NON_STRING_SUBTASK),
    ('model_id = [0]\nsubtasks = ["  "]\naccess_list = [[]]', ParseFailure.EMPTY_SUBTASK),
    ('model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[1], []]', ParseFailure.FORWARD_REFERENCE),
    ('model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], [1]]', ParseFailure.SELF_REFERENCE),
    ('model_id = [0]\nsubtasks = ["a"]\naccess_list = [["some"]]', ParseFailure.INVALID_ACCESS),
    ('model_id = [0]\nsubtasks = ["a"]\naccess_list = [5]', ParseFailure.INVALID_ACCESS),
    ('model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], [-1]]', ParseFailure.INVALID_ACCESS),
    ("model_id = []\nsubtasks = []\naccess_list = []", ParseFailure.EMPTY_WORKFLOW),
    ("model_id = [0]\nsubtasks = [f'{x}']\naccess_list = [[]]", ParseFailure.MALFORMED_LIST),
])
def test_every_rejection_has_its_reason(text, reason):
    assert reason_of(text) == reason


def test_three_empty_lists_accept_in_a_recursive_round():
    workflow = parse("Looks right.\nmodel_id = []\nsubtasks = []\naccess_list = []", recursive_round=True)
    assert workflow.accepts_previous and workflow.steps == ()


def test_too_long_text_is_rejected_cheaply():
    assert reason_of("x" * 200_000) == ParseFailure.TEXT_TOO_LONG


def test_deep_nesting_does_not_crash():
    text = "model_id = " + "[" * 500 + "]" * 500 + '\nsubtasks = ["a"]\naccess_list = [[]]'
    assert reason_of(text) == ParseFailure.MALFORMED_LIST


def test_code_in_lists_is_never_executed(tmp_path):
    marker = tmp_path / "pwned"
    text = (f"model_id = [__import__('os').system('touch {marker}')]\n"
            f"subtasks = [open('{marker}', 'w').write('x')]\naccess_list = [[]]")
    assert reason_of(text) == ParseFailure.MALFORMED_LIST
    assert not marker.exists()


def test_render_is_the_paper_format():
    workflow = Workflow((Step(2, "Design", ()), Step(0, 'Say "hi"\nthen stop', ALL), Step(1, "c", (0, 1))))
    assert workflow.render() == ('model_id = [2, 0, 1]\nsubtasks = ["Design", "Say \\"hi\\"\\nthen stop", "c"]\n'
                                 'access_list = [[], ["all"], [0, 1]]')
    assert parse(workflow.render()) == workflow


def test_no_eval_or_exec_in_the_parser_source():
    import inspect

    import conductor.workflow as module
    source = inspect.getsource(module)
    assert "literal_eval" in source
    assert " eval(" not in source and "exec(" not in source
