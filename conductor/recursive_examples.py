"""The recursive round in the SFT warm start: its prompt, with a stand-in for what the team produced.

Without these examples the warm start never sees the recursive prompt (the root conversation, the previous
plan as the assistant's turn, then the final response and the accept rule: conductor/prompts.py) and writes no
lists after it: on paper-7, none of 668 sampled recursive turns parsed (docs/experiments.md, "why the
recursive round hurts"). A recursive example shows one of the root's example workflows as the previous plan
and a stand-in final response: the question's reference answer, or a plausible wrong one, each half the time,
in the words the simulated workers answer in (conductor/simulator/render.py). Its target accepts (three
empty lists) with probability ``sft.recursive_accept`` or writes a new example workflow, whatever the
stand-in's correctness: the warm start teaches both answers' format and no preference between them; when to
accept is GRPO's to learn from the episode's reward (learner.first_round_weight, the paper's discount).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Optional

from conductor.prompt_builder import PromptBuilder
from conductor.roster import Roster
from conductor.simulator.presets import SimWorker
from conductor.simulator.render import own_value, render_answer
from conductor.tasks.task import Task
from conductor.workflow import Workflow

ACCEPT = Workflow(()).render()
_PLAIN_WORKER = SimWorker("stand-in", "", {})  # no working before the answer


def stand_in_response(task: Task, rng: random.Random, workers: Sequence[SimWorker] = ()) -> str:
    """A final response for ``task``: right or wrong by a fair draw, worded as one of ``workers`` (drawn;
    none: the answer alone) would answer it alone."""
    correct, draw = rng.random() < 0.5, rng.random()
    worker = rng.choice(list(workers)) if workers else _PLAIN_WORKER
    return render_answer(task, own_value(task, correct, draw), worker, "solve", draw)


def recursive_prompt_ids(builder: PromptBuilder, tasks: Sequence[Task], rosters: Sequence[Roster],
                         previous_plans: Sequence[str], rng: random.Random,
                         workers: Sequence[SimWorker] = (),
                         settings: Optional[Sequence[Optional[int]]] = None) -> list[list[int]]:
    """One recursive-round prompt per task, as token ids: its root prompt, ``previous_plans`` as the
    assistant's turn, and a stand-in final response; ``settings``: a cost-dial run's, one per task."""
    if not len(tasks) == len(rosters) == len(previous_plans):
        raise ValueError(f"{len(tasks)} tasks, {len(rosters)} rosters and {len(previous_plans)} previous plans")
    settings = settings if settings is not None else [None] * len(tasks)
    if len(settings) != len(tasks):
        raise ValueError(f"{len(tasks)} tasks and {len(settings)} cost-dial settings")
    return [builder.recursive_prompt_ids(task, roster, plan, stand_in_response(task, rng, workers), setting)
            for task, roster, plan, setting in zip(tasks, rosters, previous_plans, settings)]
