"""What the trained routers learn from: every worker's answer to every *training* question, verified.

RouterDC-style and RLlib routers are trained on the train split (``evaluate.split`` names the disjoint
split they are scored on). One workflow of independent steps, one per worker, runs per training question
(so each question costs one call per worker); each worker's answer is scored as if it had been asked alone
(conductor/episode_score.py), and the verdicts and dollars become a questions x workers table, with the
questions' MiniLM embeddings. Collected once per evaluation and shared by every router.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import numpy as np

from conductor.config import VerifierConfig
from conductor.episode_score import EpisodeScorer
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.tasks.task import Task
from conductor.verifiers.judge import Judge

if TYPE_CHECKING:
    from conductor.evaluation.method import MethodContext


@dataclass(frozen=True)
class RoutingTable:
    task_ids: tuple[str, ...]
    embeddings: np.ndarray  # questions x 384, unit rows
    correct: np.ndarray  # questions x workers, 1.0 / 0.0; NaN: an infrastructure error (call or verifier)
    usd: np.ndarray  # questions x workers

    def __len__(self) -> int:
        return len(self.task_ids)


async def shared_routing_table(context: MethodContext, limit: asyncio.Semaphore) -> RoutingTable:
    """The context's table, collected on the first router's call and awaited by the others (kept in
    ``context.shared``, so every router of one evaluation learns from the same answers)."""
    if "routing_table" not in context.shared:
        context.shared["routing_table"] = asyncio.ensure_future(collect_routing_table(
            context.train_tasks, context.roster, context.executor, context.verifier, limit, context.judge))
    return await context.shared["routing_table"]


async def collect_routing_table(tasks: Sequence[Task], roster: Roster, executor: WorkflowExecutor,
                                verifier: VerifierConfig, limit: asyncio.Semaphore,
                                judge: Optional[Judge] = None) -> RoutingTable:
    from conductor.evaluation.embeddings import embed
    from conductor.evaluation.fixed_methods import every_worker_alone
    from conductor.evaluation.outcome import Attempt

    if not tasks:
        raise ValueError("the routers need training questions: evaluate on split 'heldout' or 'val'")
    everyone = every_worker_alone(len(roster))
    scorer = EpisodeScorer(verifier, judge=judge)

    async def row(task: Task) -> tuple[list[float], list[float]]:
        async with limit:
            result = await executor.execute(everyone, task.prompt, roster)
        scores = await asyncio.gather(*(scorer.score(task, Attempt.alone(step)) for step in result.steps))
        correct = [float(s.correct) if s.scored else float("nan") for s in scores]
        return correct, [step.cost_usd for step in result.steps]

    rows = await asyncio.gather(*(row(task) for task in tasks))
    embeddings = await asyncio.to_thread(embed, [task.prompt for task in tasks])
    return RoutingTable(tuple(t.id for t in tasks), embeddings,
                        np.array([r[0] for r in rows]), np.array([r[1] for r in rows]))
