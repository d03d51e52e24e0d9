"""One question, end to end: the root workflow, then up to ``rounds`` recursive rounds.

Round 0 parses the Conductor's sampled text (three empty lists are a format error there) and executes
it. Each recursive round shows the Conductor its previous plan and the final response; it answers with
a new workflow (executed with the previous final turn visible to ``"all"`` steps) or with three empty
lists to accept the answer. A parse failure in any round makes the episode a format error; a worker
failure makes it an infrastructure error, which is never scored as a wrong answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Optional

from conductor.executor import WorkflowExecutor
from conductor.prompts import FewShotExample, Messages, recursive_messages
from conductor.roster import Roster
from conductor.trace import RoundTrace, StepTrace, steps_cost_usd, steps_worker_tokens
from conductor.workflow import ParseFailure, WorkflowParseError, parse_workflow

ConductorFn = Callable[[Messages], Awaitable[Optional[str]]]  # None: no room for another turn


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


class EpisodeRunner:
    def __init__(self, executor: WorkflowExecutor, fewshot: tuple[FewShotExample, ...], *, max_steps: int,
                 show_prices: bool = True):
        self.executor = executor
        self.fewshot = fewshot
        self.max_steps = max_steps
        self.show_prices = show_prices

    async def run(self, question: str, roster: Roster, root_text: str, *, recursive_rounds: int = 0,
                  conductor: Optional[ConductorFn] = None, root_truncated: bool = False,
                  cost_quality: Optional[int] = None) -> EpisodeResult:
        """``root_truncated``: the root completion hit the token limit; it is a format error unexecuted
        (otherwise a policy learns to stop ending its turns, and trailing noise dilutes the gradient).
        ``cost_quality``: the cost dial's setting the root prompt stated, stated again in recursive rounds."""
        if recursive_rounds and conductor is None:
            raise ValueError("recursive rounds need a conductor callable")
        episode = EpisodeResult()
        text = root_text
        previous_final = None
        for round_index in range(recursive_rounds + 1):
            if round_index > 0:
                messages = recursive_messages(question, roster, self.fewshot, previous_plan=text,
                                              final_response=episode.answer or "", max_steps=self.max_steps,
                                              show_prices=self.show_prices, cost_quality=cost_quality)
                text = await conductor(messages)
                if text is None:  # the recursive prompt outgrew the engine's context: the answer so far stands
                    return episode
            trace = RoundTrace(round=round_index, conductor_text=text)
            episode.rounds.append(trace)
            if round_index == 0 and root_truncated:
                trace.parse_error, trace.parse_detail = ParseFailure.TRUNCATED, "no end-of-turn within the token limit"
                return episode
            try:
                workflow = parse_workflow(text, num_workers=len(roster), max_steps=self.max_steps,
                                          recursive_round=round_index > 0)
            except WorkflowParseError as exc:
                trace.parse_error, trace.parse_detail = exc.reason, exc.detail
                return episode
            trace.workflow = workflow
            if workflow.accepts_previous:
                trace.accepted_previous, trace.answer = True, episode.answer
                return episode
            result = await self.executor.execute(workflow, question, roster, round_index=round_index,
                                                 previous_final=previous_final)
            trace.steps, trace.answer, trace.infra_error = result.steps, result.answer, result.infra_error
            if result.infra_error:
                episode.answer = None
                return episode
            episode.answer, previous_final = result.answer, result.final_turn
        return episode
