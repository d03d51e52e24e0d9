"""Property tests of the workflow language (>= 2,000 examples each under CI=true)."""

import builtins

from hypothesis import given
from hypothesis import strategies as st

from conductor.workflow import ALL, LIST_NAMES, Step, Workflow, WorkflowParseError, parse_workflow

NUM_WORKERS, MAX_STEPS = 5, 5
subtask_text = st.text(min_size=1, max_size=60).filter(lambda s: s.strip())


@st.composite
def workflows(draw):
    size = draw(st.integers(1, MAX_STEPS))
    steps = []
    for index in range(size):
        access = draw(st.one_of(st.just(ALL), st.sets(st.integers(0, max(index - 1, 0)), max_size=index)
                                .map(lambda s, i=index: tuple(sorted(x for x in s if x < i)))))
        steps.append(Step(draw(st.integers(0, NUM_WORKERS - 1)), draw(subtask_text), access))
    return Workflow(tuple(steps))


def parse(text, recursive_round=False):
    return parse_workflow(text, num_workers=NUM_WORKERS, max_steps=MAX_STEPS, recursive_round=recursive_round)


class _NoDynamicCode:
    """Fail loudly if anything calls eval/exec while parsing."""

    def __enter__(self):
        self.saved = builtins.eval, builtins.exec
        builtins.eval = builtins.exec = self._refuse
        return self

    @staticmethod
    def _refuse(*args, **kwargs):
        raise AssertionError("the parser called eval/exec")

    def __exit__(self, *exc):
        builtins.eval, builtins.exec = self.saved


def parse_outcome(text, recursive_round=False):
    """Only a Workflow or the typed parse error may come out; nothing is ever executed."""
    with _NoDynamicCode():
        try:
            return parse(text, recursive_round)
        except WorkflowParseError as error:
            assert error.reason is not None
            return error


@given(workflows())
def test_render_parse_round_trip(workflow):
    assert parse(workflow.render()) == workflow


keyword_free = st.text(max_size=200).filter(lambda s: not any(name in s for name in LIST_NAMES))


@given(workflows(), keyword_free, keyword_free)
def test_free_text_around_a_workflow_is_ignored(workflow, before, after):
    assert parse(f"{before}\n{workflow.render()}\n{after}") == workflow


@given(st.text(max_size=400), st.booleans())
def test_arbitrary_text_raises_only_the_typed_error(text, recursive_round):
    parse_outcome(text, recursive_round)


MUTATION_PIECES = st.lists(st.sampled_from(list("[]()\"',#\\ \n0123456789al=*\u201c\u201d")
                                           + ["access_list = [", "model_id = [", "subtasks = [", '"all"']),
                          min_size=1, max_size=4).map("".join)


@st.composite
def mutated(draw):
    text = draw(workflows()).render()
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["insert", "delete", "replace", "truncate", "duplicate"]))
        position = draw(st.integers(0, len(text)))
        if kind == "insert":
            text = text[:position] + draw(MUTATION_PIECES) + text[position:]
        elif kind == "delete":
            text = text[:position] + text[position + draw(st.integers(1, 10)):]
        elif kind == "replace":
            text = text[:position] + draw(MUTATION_PIECES) + text[position + 1:]
        elif kind == "truncate":
            text = text[:position]
        else:
            text = text + "\n" + text[position:]
    return text


@given(mutated(), st.booleans())
def test_mutated_workflows_parse_or_fail_typed(text, recursive_round):
    outcome = parse_outcome(text, recursive_round)
    if isinstance(outcome, Workflow):
        assert len(outcome.steps) <= MAX_STEPS
        assert all(0 <= s.worker < NUM_WORKERS and s.subtask.strip() for s in outcome.steps)
        assert parse(outcome.render(), recursive_round) == outcome
