"""Runs one parsed workflow against a worker pool.

Step i's conversation is the (subtask, response) pairs of the steps its access list names, as prior
user/assistant turns, then its own subtask. The question is prepended to the conversation's first user
message for every step (``question_visibility="all"``) or only for step 0 (``"first"``). In a repair
round, ``"all"`` also shows the previous round's final (subtask, response) first.

A step starts as soon as the steps it can see have finished, so independent steps run concurrently;
each step's messages depend only on the steps it sees, so the trace equals the sequential run's.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol

from conductor.pool import ChatResult, DeltaSink, Messages, WorkerCallError, WorkerPoolClient
from conductor.roster import Roster
from conductor.trace import StepTrace
from conductor.workflow import ALL, Step, Workflow

Turn = tuple[str, str]  # (subtask as sent, response)
CANCELLED_IN_FLIGHT = "cancelled in flight: another step failed (what it had cost is in the pool's meters)"


class StepObserver(Protocol):
    def step_started(self, round_index: int, index: int, worker_id: str) -> None: ...

    def step_finished(self, trace: StepTrace) -> None: ...


@dataclass
class ExecutionResult:
    steps: list[StepTrace]
    answer: Optional[str]
    infra_error: Optional[str]
    infra_error_kind: Optional[str] = None  # WorkerCallError.kind of the first failed step

    @property
    def final_turn(self) -> Optional[Turn]:
        last = self.steps[-1] if self.steps else None
        return (last.subtask, last.response) if last and last.response is not None else None

    @property
    def finish_reason(self) -> Optional[str]:
        """The answering step's, as its provider reported it ("length": its max_tokens cut the answer)."""
        return self.steps[-1].finish_reason if self.answer is not None else None


class WorkflowExecutor:
    def __init__(self, pool: WorkerPoolClient, *, question_visibility: Literal["first", "all"] = "all",
                 parallel: bool = True):
        self.pool = pool
        self.question_visibility = question_visibility
        self.parallel = parallel

    def step_messages(self, index: int, step: Step, question: str, responses: dict[int, str],
                      previous_final: Optional[Turn], subtasks: list[str]) -> Messages:
        turns: list[Turn] = []
        if step.access == ALL and previous_final is not None:
            turns.append(previous_final)
        turns.extend((subtasks[j], responses[j]) for j in step.visible_steps(index))
        messages: Messages = []
        for user, assistant in turns:
            messages.append({"role": "user", "content": user})
            messages.append({"role": "assistant", "content": assistant})
        messages.append({"role": "user", "content": step.subtask})
        if self.question_visibility == "all" or index == 0:
            messages[0] = {"role": "user", "content": f"Question:\n{question}\n\n{messages[0]['content']}"}
        return messages

    async def execute(self, workflow: Workflow, question: str, roster: Roster, *, round_index: int = 0,
                      previous_final: Optional[Turn] = None,
                      step_params: Optional[Sequence[dict[str, Any]]] = None,
                      observer: Optional[StepObserver] = None,
                      final_sink: Optional[DeltaSink] = None,
                      max_billable_attempts: Optional[int] = None) -> ExecutionResult:
        """``step_params``: per-step sampling parameters (e.g. a ``seed`` per independent sample).
        ``observer`` hears each step start and finish (the endpoint's progress events); ``final_sink``
        receives the last step's reply as it streams; ``max_billable_attempts`` goes to each call (a cost
        cap's: conductor/pool.py)."""
        steps = workflow.steps
        subtasks = [s.subtask for s in steps]
        results: dict[int, ChatResult] = {}
        errors: dict[int, str] = {}
        kinds: dict[int, str] = {}
        failures: dict[int, WorkerCallError] = {}
        limit = {} if max_billable_attempts is None else {"max_billable_attempts": max_billable_attempts}

        async def run_step(index: int) -> None:
            step = steps[index]
            if self.parallel:  # a failed dependency raises here, so this step never runs
                await asyncio.gather(*(tasks[j] for j in step.visible_steps(index)))
            responses = {j: results[j].text for j in step.visible_steps(index)}
            messages = self.step_messages(index, step, question, responses, previous_final, subtasks)
            started = time.perf_counter()
            if observer is not None:
                observer.step_started(round_index, index, roster.worker_id(step.worker))
            sink = final_sink if index == len(steps) - 1 else None
            try:
                params = step_params[index] if step_params else None
                result = await self.pool.chat(roster.worker_id(step.worker), messages, params, on_delta=sink, **limit)
            except WorkerCallError as exc:
                errors[index], kinds[index], failures[index] = str(exc), exc.kind, exc
                if observer is not None:
                    observer.step_finished(self._trace(round_index, index, step, roster, None, errors[index], exc))
                raise
            except asyncio.CancelledError:  # sent, then stopped: another step failed (or the caller left)
                errors[index] = CANCELLED_IN_FLIGHT
                if observer is not None:
                    observer.step_finished(self._trace(round_index, index, step, roster, None, errors[index]))
                raise
            results[index] = dataclasses.replace(result, latency_s=time.perf_counter() - started)
            if observer is not None:
                observer.step_finished(self._trace(round_index, index, step, roster, results[index], None))

        tasks: dict[int, asyncio.Task] = {}
        if self.parallel:
            for index in range(len(steps)):
                tasks[index] = asyncio.ensure_future(run_step(index))
            await _wait_cancelling_on_failure(list(tasks.values()))
        else:
            for index in range(len(steps)):
                try:
                    await run_step(index)
                except WorkerCallError:
                    break

        traces = [self._trace(round_index, i, s, roster, results.get(i), errors.get(i), failures.get(i))
                  for i, s in enumerate(steps)]
        infra_error = next((f"step {i}: {errors[i]}" for i in sorted(errors) if i in kinds), None)
        answer = None if infra_error or not steps else results[len(steps) - 1].text
        kind = kinds[min(kinds)] if kinds else None
        return ExecutionResult(steps=traces, answer=answer, infra_error=infra_error, infra_error_kind=kind)

    @staticmethod
    def _trace(round_index: int, index: int, step: Step, roster: Roster, result: Optional[ChatResult],
               error: Optional[str], failure: Optional[WorkerCallError] = None) -> StepTrace:
        trace = StepTrace(round=round_index, index=index, shown_worker=step.worker,
                          worker_id=roster.worker_id(step.worker), subtask=step.subtask, access=step.access,
                          visible=step.visible_steps(index))
        if result is not None:
            trace.response = result.text
            trace.tokens_in, trace.tokens_out = result.prompt_tokens, result.completion_tokens
            trace.reasoning_tokens = result.reasoning_tokens
            trace.latency_s, trace.cost_usd, trace.retries = result.latency_s, result.cost_usd, result.retries
            trace.finish_reason = result.finish_reason
            trace.failed_attempts_usd, trace.unsettled_attempts = result.failed_attempts_usd, result.unsettled_attempts
        else:
            trace.error = error or "not run: an earlier step failed"
        if failure is not None:
            trace.error_kind, trace.retries = failure.kind, failure.retries
            trace.failed_attempts_usd = failure.failed_attempts_usd
            trace.unsettled_attempts = failure.unsettled_attempts
        return trace


async def _wait_cancelling_on_failure(tasks: list[asyncio.Task]) -> None:
    """Wait for all; on the first failure cancel the rest (their calls would be wasted money). A step that
    raised anything but ``WorkerCallError`` raises it here."""
    if not tasks:
        return
    try:
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
    except asyncio.CancelledError:  # the caller gave up (a timeout, a client gone): so do the steps
        for task in tasks:
            task.cancel()
        raise
    if any(t.exception() is not None for t in done if not t.cancelled()):
        for task in pending:
            task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    unexpected = next((t.exception() for t in tasks if not t.cancelled()
                       and not isinstance(t.exception(), (WorkerCallError, type(None)))), None)
    if unexpected is not None:  # not a failed call an episode is unscored for (e.g. ReplayMiss): the caller's
        raise unexpected
