"""Smoothie (Guha et al., NeurIPS 2024): label-free routing. Every worker answers every question; the
answer of the worker estimated to be best is returned. No labels, no training split.

Model: each worker's output embedding is the unseen true output's embedding plus independent Gaussian
noise of worker-specific scale, so for workers i, j, k

    E||x_i - x_j||^2 = d_i + d_j,   hence   d_i = (E||x_i - x_j||^2 + E||x_i - x_k||^2 - E||x_j - x_k||^2) / 2

with ``d_i`` worker i's expected squared distance from the truth. ``d_i`` is averaged over every pair
(j, k) of the other workers, and the worker with the smallest ``d_i`` (the highest quality 1 / 2d) wins.

- ``smoothie_independent`` (the reference's sample-independent variant): expectations over all questions
  of the evaluation, so one worker is chosen for all of them;
- ``smoothie_dependent`` (sample-dependent): expectations over the question's ``NEIGHBOURS`` nearest
  questions (itself included) by embedding of the question, so the choice varies with the question.

Embeddings: all-MiniLM-L6-v2 (conductor/evaluation/embeddings.py). Deviations: the reference embeds with
SentenceBERT models of its choice and draws random triplets; here every pair is averaged, which is the
same estimator without sampling noise. Cost: all workers' calls (7 with paper-7), as in the reference.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from dataclasses import dataclass, field

import numpy as np

from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.registry import MethodSpec
from conductor.tasks.task import Task

NEIGHBOURS = 20


def distances_from_truth(outputs: np.ndarray) -> np.ndarray:
    """``outputs``: questions x workers x dims embeddings -> each worker's estimated d_i (length workers)."""
    workers = outputs.shape[1]
    pair = np.zeros((workers, workers))
    for i, j in itertools.combinations(range(workers), 2):
        pair[i, j] = pair[j, i] = float(np.mean(np.sum((outputs[:, i] - outputs[:, j]) ** 2, axis=-1)))
    estimates = np.zeros(workers)
    for i in range(workers):
        others = [w for w in range(workers) if w != i]
        estimates[i] = np.mean([(pair[i, j] + pair[i, k] - pair[j, k]) / 2
                                for j, k in itertools.combinations(others, 2)])
    return estimates


def choose_workers(outputs: np.ndarray, questions: np.ndarray, dependent: bool,
                   neighbours: int = NEIGHBOURS) -> np.ndarray:
    """The chosen worker per question. ``questions``: unit question embeddings (questions x dims)."""
    if not dependent:
        return np.full(len(outputs), int(np.argmin(distances_from_truth(outputs))))
    similarity = questions @ questions.T
    nearest = np.argsort(-similarity, axis=1)[:, :max(3, neighbours)]
    return np.array([int(np.argmin(distances_from_truth(outputs[row]))) for row in nearest])


@dataclass
class Smoothie:
    name: str
    context: MethodContext
    dependent: bool
    neighbours: int = NEIGHBOURS
    chosen: dict[tuple[str, int], int] = field(default_factory=dict)  # the worker picked per (question, repeat)
    _attempts: dict[tuple[str, int], Attempt] = field(default_factory=dict)

    async def prepare(self, tasks: list[Task], repeats: int, limit: asyncio.Semaphore) -> None:
        from conductor.evaluation.embeddings import embed
        from conductor.evaluation.fixed_methods import every_worker_alone

        workers = len(self.context.roster)
        everyone = every_worker_alone(workers)

        async def all_answers(task: Task) -> tuple[list, float]:
            async with limit:
                started = time.perf_counter()
                result = await self.context.executor.execute(everyone, task.prompt, self.context.roster)
                return result, time.perf_counter() - started

        keys = [(task, repeat) for repeat in range(repeats) for task in tasks]
        runs = await asyncio.gather(*(all_answers(task) for task, _ in keys))
        texts = [step.response or "" for result, _ in runs for step in result.steps]
        outputs = (await asyncio.to_thread(embed, texts)).reshape(len(keys), workers, -1)
        questions = await asyncio.to_thread(embed, [task.prompt for task, _ in keys])
        chosen = choose_workers(outputs, questions, self.dependent, self.neighbours)
        for (task, repeat), (result, seconds), worker in zip(keys, runs, chosen):
            self.chosen[(task.id, repeat)] = int(worker)
            self._attempts[(task.id, repeat)] = Attempt(
                answer=result.steps[worker].response, steps=result.steps, infra_error=result.infra_error,
                latency_s=seconds)

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        return self._attempts[(task.id, repeat)]


SPECS = (MethodSpec("smoothie_dependent", functools.partial(Smoothie, dependent=True)),
         MethodSpec("smoothie_independent", functools.partial(Smoothie, dependent=False)))
