"""Runs methods over questions and repeats: each attempt timed, scored as training scores an episode
(conductor/episode_score.py), one ``Outcome`` kept.

Attempts run concurrently up to ``concurrency`` (the pool's own limits still apply underneath). Verifying
is synchronous (code runs in the sandbox), so it runs in a thread pool, off the event loop; a judged kind
is graded by ``judge``, a worker of the same pool (conductor/verifiers/judge.py). A verdict is cached per
(question, answer text), since many attempts give the same answer (the judge is paid once for it).
``on_done`` is called once per finished attempt (the progress bar).

A method that must see every question first (Smoothie estimates worker quality from all the outputs) or
train on the train split (the routers) has a ``prepare(tasks, repeats, limit)`` coroutine; it runs before
any attempt, with the same concurrency limit.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

from conductor.config import VerifierConfig
from conductor.episode_score import EpisodeScorer, scoring_threads
from conductor.evaluation.method import Method
from conductor.evaluation.outcome import Outcome, outcome_of
from conductor.tasks.task import Task
from conductor.verifiers.judge import Judge


class Harness:
    def __init__(self, verifier: Optional[VerifierConfig] = None, concurrency: int = 32, judge: Optional[Judge] = None):
        self.verifier = verifier or VerifierConfig()
        self.concurrency = concurrency
        self.judge = judge

    async def run(self, methods: Sequence[Method], tasks: Sequence[Task], repeats: int = 1,
                  on_done: Optional[Callable[[Outcome], None]] = None,
                  on_prepare: Optional[Callable[[str], None]] = None) -> list[Outcome]:
        """Outcomes in (method, task, repeat) order, whatever order the attempts finished in."""
        gate = asyncio.Semaphore(self.concurrency)
        threads = ThreadPoolExecutor(scoring_threads(tasks, self.verifier), thread_name_prefix="verify")
        scorer = EpisodeScorer(self.verifier, threads=threads, cache=True, judge=self.judge)  # futures: this loop

        async def one(method: Method, task: Task, repeat: int) -> Outcome:
            async with gate:
                started = time.perf_counter()
                attempt = await method.attempt(task, repeat)
                latency = attempt.latency_s if attempt.latency_s is not None else time.perf_counter() - started
            score = await scorer.score(task, attempt)
            outcome = outcome_of(method.name, task.id, task.domain, repeat, attempt, score, latency)
            if on_done is not None:
                on_done(outcome)
            return outcome

        try:
            for method in methods:
                prepare = getattr(method, "prepare", None)
                if prepare is not None:
                    if on_prepare is not None:
                        on_prepare(method.name)
                    await prepare(tasks, repeats, gate)
            return list(await asyncio.gather(*(one(m, t, r) for m in methods for t in tasks for r in range(repeats))))
        finally:
            threads.shutdown(wait=True)
