"""One question, end to end: the root workflow, then up to ``rounds`` recursive rounds. Training,
evaluation, the demo and the endpoint all run their episodes here.

Round 0 parses the Conductor's sampled text (three empty lists are a format error there) and executes
it. Each recursive round shows the Conductor its previous plan and the final response; it answers with
a new workflow (executed with the previous final turn visible to ``"all"`` steps) or with three empty
lists to accept the answer. A parse failure in any round makes the episode a format error; a worker
failure makes it an infrastructure error, which is never scored as a wrong answer.

A caller may add to each round through ``RoundHooks`` (the endpoint: a cost cap's cut, the answer's
sampling, progress events, the answer streamed) and may hold an episode to a step limit under the
runner's; training adds nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from conductor.executor import ExecutionResult, StepObserver, Turn, WorkflowExecutor
from conductor.pool import DeltaSink
from conductor.prompts import FewShotExample, Messages, recursive_messages
from conductor.roster import Roster
from conductor.trace import RoundTrace, StepTrace, steps_cost_usd, steps_worker_tokens
from conductor.workflow import ParseFailure, Workflow, WorkflowParseError, parse_workflow


@dataclass(frozen=True)
class ConductorTurn:
    """One recursive turn's text; ``truncated``: it hit the token limit before its end of turn, and the caller
    counts that a format error (training does, as for the root: ``root_truncated``)."""

    text: str
    truncated: bool = False


ConductorFn = Callable[[Messages], Awaitable[Optional[ConductorTurn]]]  # None: no room for another turn


@dataclass
class EpisodeResult:
    rounds: list[RoundTrace] = field(default_factory=list)
    answer: Optional[str] = None

    @property
    def format_ok(self) -> bool:
        return all(r.parse_error is None for r in self.rounds)

    @property
    def infra_error(self) -> Optional[str]:
        return next((r.infra_error for r in self.rounds if r.infra_error), None)

    @property
    def steps(self) -> list[StepTrace]:
        return [s for r in self.rounds for s in r.steps]

    @property
    def cost_usd(self) -> float:
        return steps_cost_usd(self.steps)

    @property
    def worker_tokens(self) -> int:
        return steps_worker_tokens(self.steps)


class RoundHooks:
    """What a caller adds to each executed round; these defaults (training's) add nothing."""

    observer: Optional[StepObserver] = None  # hears each step start and finish
    answer_sink: Optional[DeltaSink] = None  # the last round allowed: nothing can replace its answer, so it streams
    max_billable_attempts: Optional[int] = None  # a cost cap's: each call's attempts that may be billed

    def fit(self, workflow: Workflow, trace: RoundTrace, previous_final: Optional[Turn]) -> Workflow:
        """The prefix of ``workflow`` to run (empty: none of it may, the round is skipped and the episode
        ends); a cut is noted in ``trace.notes``."""
        return workflow

    def step_params(self, workflow: Workflow) -> Optional[list[Optional[dict[str, Any]]]]:
        """Per-step sampling parameters for the executor (None: the workers' own)."""
        return None


NO_HOOKS = RoundHooks()


def record_execution(trace: RoundTrace, result: ExecutionResult) -> None:
    """What running a round's workflow leaves on its trace."""
    trace.steps, trace.answer = result.steps, result.answer
    trace.infra_error, trace.infra_error_kind = result.infra_error, result.infra_error_kind


class EpisodeRunner:
    def __init__(self, executor: WorkflowExecutor, fewshot: tuple[FewShotExample, ...], *, max_steps: int,
                 show_prices: bool = True):
        self.executor = executor
        self.fewshot = fewshot
        self.max_steps = max_steps
        self.show_prices = show_prices

    async def run(self, question: str, roster: Roster, root_text: str, *, recursive_rounds: int = 0,
                  conductor: Optional[ConductorFn] = None, root_truncated: bool = False,
                  cost_quality: Optional[int] = None, max_steps: Optional[int] = None,
                  hooks: RoundHooks = NO_HOOKS) -> EpisodeResult:
        """``root_truncated``: the root completion hit the token limit; it is a format error unexecuted
        (otherwise a policy learns to stop ending its turns, and trailing noise dilutes the gradient); a
        recursive turn says so itself (``ConductorTurn.truncated``).
        ``cost_quality``: the cost dial's setting the root prompt stated, stated again in recursive rounds.
        ``max_steps``: this episode's step limit, stated in its recursive prompts (default: the runner's);
        a longer workflow within the runner's limit is cut to it, not refused."""
        if recursive_rounds and conductor is None:
            raise ValueError("recursive rounds need a conductor callable")
        limit = max_steps or self.max_steps
        episode = EpisodeResult()
        text = root_text
        previous_final: Optional[Turn] = None
        for round_index in range(recursive_rounds + 1):
            if round_index > 0:
                messages = recursive_messages(question, roster, self.fewshot, previous_plan=text,
                                              final_response=episode.answer or "", max_steps=limit,
                                              show_prices=self.show_prices, cost_quality=cost_quality)
                turn = await conductor(messages)
                if turn is None:  # the recursive prompt outgrew the engine's context: the answer so far stands
                    return episode
                text, truncated = turn.text, turn.truncated
            else:
                truncated = root_truncated
            trace = RoundTrace(round=round_index, conductor_text=text)
            episode.rounds.append(trace)
            if truncated:
                trace.parse_error, trace.parse_detail = ParseFailure.TRUNCATED, "no end-of-turn within the token limit"
                return episode
            try:
                workflow = parse_workflow(text, num_workers=len(roster), max_steps=max(limit, self.max_steps),
                                          recursive_round=round_index > 0)
            except WorkflowParseError as exc:
                trace.parse_error, trace.parse_detail = exc.reason, exc.detail
                return episode
            trace.workflow = workflow
            if workflow.accepts_previous:
                trace.accepted_previous, trace.answer = True, episode.answer
                return episode
            if len(workflow.steps) > limit:
                trace.notes.append(f"cut from {len(workflow.steps)} to {limit} steps (max_steps)")
                workflow = trace.workflow = Workflow(workflow.steps[:limit])
            fitted = hooks.fit(workflow, trace, previous_final)
            if not fitted.steps:
                trace.skipped = True
                return episode
            trace.workflow = fitted
            last_round = round_index == recursive_rounds
            result = await self.executor.execute(fitted, question, roster, round_index=round_index,
                                                 previous_final=previous_final, step_params=hooks.step_params(fitted),
                                                 observer=hooks.observer,
                                                 final_sink=hooks.answer_sink if last_round else None,
                                                 max_billable_attempts=hooks.max_billable_attempts)
            record_execution(trace, result)
            if result.infra_error:
                episode.answer = None
                return episode
            episode.answer, previous_final = result.answer, result.final_turn
        return episode
