"""The trained Conductor as an evaluation method: it writes a workflow for the question, the executor runs it.

``conductor`` runs the root workflow only; ``conductor_recursive`` gives the Conductor up to
``executor.max_rounds`` recursive rounds, in which it sees its previous plan and the final answer and
either accepts it (three empty lists) or writes a new workflow. Both sample at
``evaluate.conductor_temperature`` (0: greedy, the policy's single best workflow), one sample per question
and repeat, with the prompt training used (roster, few-shot examples, prices), so a checkpoint is scored
on exactly the task it learned. A cost-dial policy is scored at one setting (``evaluate.cost_quality``),
which its prompt states as training's did.

A root completion that is not a valid workflow is a wrong answer (``parse_error`` says why), never a
fallback to some worker: the score is the Conductor's own. An invalid *recursive* turn leaves the previous
round's answer standing, as a deployment would deliver it (``parse_error`` records it behind
``recursive_turn:``, so a report tells a Conductor that cannot plan from one that cannot recurse; training
scores it as a format error). The Conductor's tokens are those it generated, over all its rounds.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from conductor.episode import ConductorTurn, EpisodeRunner
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import RECURSIVE_TURN, Attempt
from conductor.evaluation.registry import MethodSpec
from conductor.prompt_builder import PromptBuilder
from conductor.prompts import Messages
from conductor.rollout import PROMPT_TOO_LONG, Generator, SamplingSettings
from conductor.roster import Roster
from conductor.tasks.task import Task
from conductor.workflow_constraint import workflow_regex

CONDUCTOR_METHODS = ("conductor", "conductor_recursive")


def conductor_label(checkpoint_name: str, kind: str) -> str:
    """The report's name of a Conductor method: ``conductor_recursive`` of checkpoint ``conductor_cost``
    is ``conductor_cost_recursive``."""
    return checkpoint_name + kind.removeprefix("conductor")


def is_conductor(method_name: str) -> bool:
    """A Conductor's row, whatever its checkpoint was named in the report (``evaluate.conductor_name``)."""
    return method_name.startswith("conductor")


@dataclass
class ConductorPolicy:
    """What a Conductor method needs besides the pool: the policy's generator and the training prompt."""

    generator: Generator
    prompts: PromptBuilder
    episodes: EpisodeRunner
    sampling: SamplingSettings
    max_rounds: int
    name: str = "conductor"  # the report's name for this checkpoint
    constrain_format: bool = False  # decode under the workflow expression (conductor/workflow_constraint.py)
    cost_quality: Optional[int] = None  # a dial policy's setting, stated in every prompt (conductor/cost_dial.py)


@dataclass
class ConductorMethod:
    name: str
    roster: Roster
    policy: ConductorPolicy
    rounds: int  # recursive rounds after the root workflow

    def _sampling(self, recursive: bool) -> SamplingSettings:
        if not self.policy.constrain_format:
            return self.policy.sampling
        expression = workflow_regex(len(self.roster), self.policy.episodes.max_steps, recursive_round=recursive)
        return replace(self.policy.sampling, format_regex=expression)

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        prompt = self.policy.prompts.task_prompt_ids(task, self.roster, self.policy.cost_quality)
        [[sample]] = await self.policy.generator.generate([prompt], 1, self._sampling(recursive=False))
        if sample.finish_reason == PROMPT_TOO_LONG:
            return Attempt(answer=None, infra_error=f"conductor prompt of {len(prompt)} tokens leaves no room "
                           "under engine.max_model_len")
        generated = [len(sample.token_ids)]

        async def recursive_turn(messages: Messages) -> Optional[ConductorTurn]:
            [[turn]] = await self.policy.generator.generate([self.policy.prompts.prompt_ids(messages)], 1,
                                                            self._sampling(recursive=True))
            generated.append(len(turn.token_ids))
            if turn.finish_reason == PROMPT_TOO_LONG:
                return None
            return ConductorTurn(turn.text, truncated=turn.finish_reason == "length")  # as the root's

        episode = await self.policy.episodes.run(
            task.prompt, self.roster, sample.text, recursive_rounds=self.rounds,
            conductor=recursive_turn if self.rounds else None, root_truncated=sample.finish_reason == "length",
            cost_quality=self.policy.cost_quality)
        root_error = episode.rounds[0].parse_error
        turn_error = next((r.parse_error.value for r in episode.rounds[1:] if r.parse_error), None)
        parse_error = root_error.value if root_error else (RECURSIVE_TURN + turn_error if turn_error else None)
        root_failed = root_error is not None
        executed = sum(1 for r in episode.rounds if r.steps)
        return Attempt(answer=None if root_failed else episode.answer, steps=episode.steps,
                       infra_error=episode.infra_error, conductor_tokens=sum(generated),
                       rounds=max(1, executed), parse_error=parse_error,
                       accepted=any(r.accepted_previous for r in episode.rounds[1:]))


def conductor_method(kind: str, context: MethodContext) -> ConductorMethod:
    """The context's policy under its report name; ``conductor_recursive`` gets the executor's rounds."""
    if context.conductor is None:
        raise ValueError(f"method {kind!r} needs a trained policy: set evaluate.policy")
    rounds = context.conductor.max_rounds if kind == "conductor_recursive" else 0
    return ConductorMethod(conductor_label(context.conductor.name, kind), context.roster, context.conductor, rounds)


SPECS = tuple(MethodSpec(kind, conductor_method) for kind in CONDUCTOR_METHODS)
