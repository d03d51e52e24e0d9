import asyncio

import pytest

from conductor.config import WorkerSpec
from conductor.episode import ConductorTurn, EpisodeRunner, RoundHooks
from conductor.executor import WorkflowExecutor
from conductor.pool import ChatResult, WorkerCallError
from conductor.roster import Roster
from conductor.scripted_pool import ScriptedPool
from conductor.workflow import ALL, ParseFailure, Step, Workflow, parse_workflow

ROSTER = Roster.full([WorkerSpec(id=f"w{i}", description=f"worker {i}") for i in range(3)])


def echo_pool(delay_s=0.0, failing=frozenset()):
    """Each worker answers with its id and the number of messages it saw (deterministic)."""
    def reply(worker):
        return lambda messages: f"{worker} saw {len(messages)} messages; last: {messages[-1]['content'][-20:]}"
    return ScriptedPool({f"w{i}": reply(f"w{i}") for i in range(3)}, delay_s=delay_s, failing=failing)


def run(coro):
    return asyncio.run(coro)


def call_orders(access_list_text, steps):
    """Each executor's worker calls as starts ("s") and ends ("e") in the order they happened: which calls
    overlapped, read from the event loop itself rather than from a clock a loaded machine stretches."""
    workers = ", ".join(str(i % 3) for i in range(steps))
    subtasks = ", ".join(f'"s{i}"' for i in range(steps))
    workflow = parse_workflow(f"model_id = [{workers}]\nsubtasks = [{subtasks}]\naccess_list = {access_list_text}",
                              num_workers=3, max_steps=5)
    orders, results = {}, {}
    for parallel in (True, False):
        pool, events = echo_pool(delay_s=0.01), []
        answer = pool.chat

        async def traced(worker_id, messages, params=None, on_delta=None, answer=answer, events=events):
            events.append("s")
            result = await answer(worker_id, messages, params, on_delta)
            events.append("e")
            return result

        pool.chat = traced
        results[parallel] = run(WorkflowExecutor(pool, parallel=parallel).execute(workflow, "Q?", ROSTER))
        orders[parallel] = "".join(events)
    assert results[True].answer == results[False].answer
    assert len(results[True].steps) == steps
    assert all(a.same_outcome(b) for a, b in zip(results[True].steps, results[False].steps))
    return orders


def test_fan_in_runs_on_its_critical_path_with_identical_traces():
    # [[],[],["all"]]: steps 0 and 1 overlap, step 2 waits for both: the critical path is 2 calls of 3.
    orders = call_orders('[[], [], ["all"]]', 3)
    assert orders == {True: "sseese", False: "sesese"}


def test_wider_fan_in_runs_its_three_independent_steps_at_once():
    orders = call_orders('[[], [], [], ["all"]]', 4)  # the critical path: 2 calls of 4
    assert orders == {True: "ssseeese", False: "sesesese"}


def test_access_lists_build_prior_turns_and_question_visibility():
    workflow = Workflow((Step(0, "plan", ()), Step(1, "solve", (0,)), Step(2, "check", ALL), Step(0, "alone", ())))
    for visibility in ("all", "first"):
        pool = echo_pool()
        run(WorkflowExecutor(pool, question_visibility=visibility, parallel=False).execute(workflow, "THE Q", ROSTER))
        by_subtask = {messages[-1]["content"].split("\n\n")[-1]: messages for _, messages in pool.calls}
        assert [m["role"] for m in by_subtask["solve"]] == ["user", "assistant", "user"]
        assert by_subtask["solve"][0]["content"].endswith("plan")
        shown = [m["content"].split("\n\n")[-1] for m in by_subtask["check"] if m["role"] == "user"]
        assert shown == ["plan", "solve", "check"]
        assert len(by_subtask["alone"]) == 1
        question_seen = ["THE Q" in messages[0]["content"] for _, messages in pool.calls]
        assert question_seen == ([True] * 4 if visibility == "all" else [True, False, False, False])


def test_worker_failure_marks_infra_error_and_skips_dependents():
    workflow = Workflow((Step(0, "a", ()), Step(1, "b", (0,)), Step(2, "c", ())))
    pool = echo_pool(failing=frozenset({"w0"}))
    result = run(WorkflowExecutor(pool).execute(workflow, "q", ROSTER))
    assert result.infra_error and "step 0" in result.infra_error and "w0" in result.infra_error
    assert result.answer is None
    assert result.steps[0].error and result.steps[1].response is None and result.steps[1].error


def runner(pool):
    return EpisodeRunner(WorkflowExecutor(pool), (), max_steps=5)


ROOT = 'model_id = [0, 1]\nsubtasks = ["draft", "final"]\naccess_list = [[], ["all"]]'
ACCEPT = "fine\nmodel_id = []\nsubtasks = []\naccess_list = []"


def test_recursive_round_accepting_returns_previous_answer():
    prompts = []

    async def conductor(messages):
        prompts.append(messages)
        return ConductorTurn(ACCEPT)

    episode = run(runner(echo_pool()).run("q", ROSTER, ROOT, recursive_rounds=1, conductor=conductor))
    assert episode.format_ok and episode.rounds[1].accepted_previous
    assert episode.answer == episode.rounds[0].answer and episode.answer.startswith("w1 saw")
    assert prompts[0][-2]["content"] == ROOT and episode.answer in prompts[0][-1]["content"]


def test_repair_round_all_access_sees_previous_final_turn():
    async def conductor(messages):
        return ConductorTurn('model_id = [2]\nsubtasks = ["repair"]\naccess_list = [["all"]]')

    pool = echo_pool()
    episode = run(runner(pool).run("q", ROSTER, ROOT, recursive_rounds=1, conductor=conductor))
    repair_messages = pool.calls[-1][1]
    previous_answer = episode.rounds[0].answer
    assert [m["role"] for m in repair_messages] == ["user", "assistant", "user"]
    assert repair_messages[1]["content"] == previous_answer
    assert episode.answer.startswith("w2 saw 3 messages")


def test_root_round_three_empty_lists_and_bad_recursive_round_are_format_errors():
    pool = echo_pool()
    episode = run(runner(pool).run("q", ROSTER, ACCEPT))
    assert not episode.format_ok and episode.answer is None and not pool.calls

    async def garbage(messages):
        return ConductorTurn("I refuse to write lists")

    episode = run(runner(echo_pool()).run("q", ROSTER, ROOT, recursive_rounds=1, conductor=garbage))
    assert not episode.format_ok and episode.rounds[1].parse_error is not None


def test_a_recursive_turn_cut_at_the_token_limit_is_a_format_error_unexecuted():
    """As the root's: a turn that never ended would otherwise run (three empty lists then rambling reads as
    an accept) and teach the policy to stop ending its turns."""
    async def cut(messages):
        return ConductorTurn(ACCEPT + "\nand then I kept writing until the limit", truncated=True)

    pool = echo_pool()
    episode = run(runner(pool).run("q", ROSTER, ROOT, recursive_rounds=1, conductor=cut))
    assert not episode.format_ok and episode.rounds[1].parse_error is ParseFailure.TRUNCATED
    assert not episode.rounds[1].accepted_previous


def test_a_parallel_step_stopped_in_flight_is_recorded_as_sent_and_stopped_not_as_never_run():
    class OneFails:
        def __init__(self):
            self.calls = []

        async def chat(self, worker_id, messages, params=None, on_delta=None, max_billable_attempts=None):
            self.calls.append(worker_id)
            if worker_id == "w1":
                raise WorkerCallError("w1", "server_error", "down")
            await asyncio.sleep(5)  # still running when its sibling fails
            return ChatResult("late", 1, 1, 0.01)

    pool, seen = OneFails(), []

    class Observer:
        def step_started(self, round_index, index, worker_id):
            seen.append(("started", index))

        def step_finished(self, trace):
            seen.append(("finished", trace.index))

    workflow = Workflow((Step(0, "a", ()), Step(1, "b", ()), Step(2, "c", (0, 1))))
    result = run(WorkflowExecutor(pool, parallel=True).execute(workflow, "q", ROSTER, observer=Observer()))
    assert pool.calls == ["w0", "w1"] and result.infra_error.startswith("step 1:")
    first, failed, never = result.steps
    assert first.error.startswith("cancelled in flight") and first.error_kind is None
    assert failed.error_kind == "server_error" and never.error.startswith("not run")
    assert sorted(seen) == [("finished", 0), ("finished", 1), ("started", 0), ("started", 1)]


def test_infra_error_in_episode_is_flagged_not_answered():
    episode = run(runner(echo_pool(failing=frozenset({"w1"}))).run("q", ROSTER, ROOT))
    assert episode.infra_error and episode.answer is None and episode.format_ok


class FirstStepThenNothing(RoundHooks):
    """A caller's cut (serving's is a cost cap): round 0 keeps its first step, later rounds keep none."""

    def __init__(self):
        self.previous_finals = []

    def fit(self, workflow, trace, previous_final):
        self.previous_finals.append(previous_final)
        if trace.round:
            return Workflow(())
        trace.notes.append("kept the first step")
        return Workflow(workflow.steps[:1])


def test_a_caller_s_cut_runs_a_prefix_and_a_round_cut_to_nothing_is_skipped_keeping_the_answer():
    async def conductor(messages):
        return ConductorTurn('model_id = [2]\nsubtasks = ["repair"]\naccess_list = [["all"]]')

    pool, hooks = echo_pool(), FirstStepThenNothing()
    episode = run(runner(pool).run("q", ROSTER, ROOT, recursive_rounds=1, conductor=conductor, hooks=hooks))
    root, repair = episode.rounds
    assert [call[0] for call in pool.calls] == ["w0"]  # the prefix ran; the skipped round called no worker
    assert len(root.workflow.steps) == 1 and root.notes == ["kept the first step"] and not root.skipped
    assert repair.skipped and not repair.steps and repair.workflow.steps[0].subtask == "repair"
    assert episode.format_ok and episode.answer == root.answer and episode.answer.startswith("w0 saw")
    assert hooks.previous_finals == [None, ("draft", root.answer)]


def test_an_episode_step_limit_is_stated_in_its_prompt_and_cuts_a_longer_workflow():
    prompts = []

    async def conductor(messages):
        prompts.append(messages)
        return ConductorTurn(ACCEPT)

    pool = echo_pool()
    episode = run(runner(pool).run("q", ROSTER, ROOT, recursive_rounds=1, conductor=conductor, max_steps=1))
    root = episode.rounds[0]
    assert len(pool.calls) == 1 and len(root.workflow.steps) == 1 and episode.format_ok
    assert root.notes == ["cut from 2 to 1 steps (max_steps)"]
    assert "at most 1 steps" in prompts[0][0]["content"] and "at most 5 steps" not in prompts[0][0]["content"]


def test_recursion_needs_a_conductor():
    with pytest.raises(ValueError):
        run(runner(echo_pool()).run("q", ROSTER, ROOT, recursive_rounds=1))


def test_truncated_root_completion_is_a_format_error_and_never_executed():
    pool = echo_pool()
    episode = run(runner(pool).run("q", ROSTER, ROOT, root_truncated=True))
    assert not episode.format_ok and episode.rounds[0].parse_error == ParseFailure.TRUNCATED
    assert not pool.calls and episode.answer is None
    assert run(runner(echo_pool()).run("q", ROSTER, ROOT)).format_ok  # the same text, finished, is fine


def test_cancelling_a_workflow_cancels_its_steps_in_flight():
    """A caller that gives up (a timeout, a client gone) stops the spending: the steps it started end too."""
    class GatedPool:
        def __init__(self):
            self.gate, self.started, self.finished = asyncio.Event(), 0, 0

        async def chat(self, worker_id, messages, params=None, on_delta=None, max_billable_attempts=None):
            self.started += 1
            await self.gate.wait()
            self.finished += 1
            raise WorkerCallError(worker_id, "late", "a cancelled step ran to the end")

    async def main():
        pool = GatedPool()
        workflow = parse_workflow('model_id = [0, 1]\nsubtasks = ["a", "b"]\naccess_list = [[], []]',
                                  num_workers=3, max_steps=5)
        running = asyncio.ensure_future(WorkflowExecutor(pool).execute(workflow, "Q?", ROSTER))
        while pool.started < 2:
            await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        pool.gate.set()
        await asyncio.sleep(0.05)
        return pool

    pool = run(main())
    assert pool.started == 2 and pool.finished == 0
