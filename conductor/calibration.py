"""Measuring each worker of a pool on a sample of the user's tasks: the numbers a twin preset is made of
(conductor/twin_preset.py; the command is cluster/calibrate.py).

Every worker answers the same questions, drawn per domain, alone and in the one single-worker wording
(``SOLVE_ALONE``, conductor/baselines.py), through the executor and the pool a run uses (its rate limits,
retries and prices), and is scored by the one episode scorer (conductor/episode_score.py) with the run's
verifier and reward. So a worker's calibrated accuracy is its ``single:<worker>`` row of an evaluation on the
same questions. An infrastructure error (a call that failed after the pool's retries, or a verifier that
could not judge) is counted and left out of the accuracy's denominator, as everywhere else.

Each call's latency is its wall time through the pool: it includes the wait for a slot under the provider's
limits, so calls that needed a retry are left out of the latency fit. Plain asyncio over an in-process
pool: a few thousand calls at a bounded concurrency need no Ray cluster.
"""

from __future__ import annotations

import asyncio
import math
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from conductor.baselines import SOLVE_ALONE
from conductor.config import WorkerSpec
from conductor.episode_score import EpisodeScorer, Status
from conductor.evaluation.outcome import Attempt
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.tasks.task import Task
from conductor.workflow import Step, Workflow


@dataclass(frozen=True)
class Call:
    """One worker's answer to one question, as scored."""

    worker: str
    task_id: str
    domain: str
    status: Status
    answered: bool  # the worker replied: its tokens, latency and price count, whatever the verdict
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0  # hidden, within completion_tokens
    latency_s: float = 0.0
    cost_usd: float = 0.0
    retries: int = 0
    infra_error: Optional[str] = None
    judge_calls: int = 0  # grading a judged answer, apart from the worker's own figures
    judge_cost_usd: float = 0.0


def draw_questions(tasks: Sequence[Task], per_domain: int, seed: int) -> dict[str, list[Task]]:
    """``per_domain`` questions of each domain drawn without replacement (all of a smaller domain), in the
    order drawn; the same tasks and seed draw the same questions."""
    by_domain: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_domain[task.domain].append(task)
    rng = random.Random(seed)
    return {domain: rng.sample(items, min(per_domain, len(items))) for domain, items in sorted(by_domain.items())}


async def measure(executor: WorkflowExecutor, workers: Sequence[WorkerSpec], questions: Sequence[Task],
                  scorer: EpisodeScorer, concurrency: int,
                  on_done: Optional[Callable[[Call], None]] = None) -> list[Call]:
    """Every worker on every question, at most ``concurrency`` calls in flight; question by question, so
    that the workers (and their providers) share the load from the start."""
    roster = Roster.full(workers)
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task, index: int) -> Call:
        async with gate:
            result = await executor.execute(Workflow((Step(index, SOLVE_ALONE, ()),)), task.prompt, roster)
        attempt = Attempt(answer=result.answer, steps=result.steps, infra_error=result.infra_error)
        score = await scorer.score(task, attempt)
        step = result.steps[0]
        call = Call(worker=roster.worker_id(index), task_id=task.id, domain=task.domain, status=score.status,
                    answered=step.response is not None, prompt_tokens=step.tokens_in,
                    completion_tokens=step.tokens_out, reasoning_tokens=step.reasoning_tokens,
                    latency_s=step.latency_s, cost_usd=step.cost_usd, retries=step.retries,
                    infra_error=score.infra_error, judge_calls=score.judge.calls,
                    judge_cost_usd=score.judge.cost_usd)
        if on_done is not None:
            on_done(call)
        return call

    return list(await asyncio.gather(*(one(task, index) for task in questions for index in range(len(workers)))))


@dataclass(frozen=True)
class DomainAccuracy:
    scored: int
    correct: int
    infra_errors: int

    @property
    def accuracy(self) -> float:
        return self.correct / self.scored if self.scored else math.nan

    @property
    def se(self) -> float:
        """The binomial standard error of the accuracy, sqrt(p (1 - p) / n)."""
        p = self.accuracy
        return math.sqrt(p * (1 - p) / self.scored) if self.scored else math.nan


@dataclass(frozen=True)
class WorkerFit:
    """One worker's measured figures: accuracy per domain, and means over the calls it answered."""

    worker: str
    domains: dict[str, DomainAccuracy]
    answered: int
    prompt_tokens: float
    visible_tokens: float  # completion tokens the caller sees (the reply's text)
    hidden_tokens: float  # reasoning billed as completion tokens and never shown
    latency_ms: float  # a log-normal's mean, as the simulator draws a worker's latency
    latency_sigma: float  # its log-scale spread
    median_latency_ms: float  # of the calls fitted
    cost_usd: float  # per answered call
    retried: int  # answered calls that needed a retry (out of the latency fit)

    def as_dict(self) -> dict[str, Any]:
        figures = {name: value for name, value in vars(self).items() if name != "domains"}
        figures["accuracy"] = {d: {"accuracy": a.accuracy if a.scored else None, "se": a.se if a.scored else None,
                                   "scored": a.scored, "correct": a.correct, "infra_errors": a.infra_errors}
                               for d, a in self.domains.items()}
        return figures


def fit_workers(calls: Sequence[Call], workers: Sequence[str]) -> list[WorkerFit]:
    return [fit_worker(worker, [c for c in calls if c.worker == worker]) for worker in workers]


def fit_worker(worker: str, calls: Sequence[Call]) -> WorkerFit:
    domains = {}
    for domain in sorted({c.domain for c in calls}):
        mine = [c for c in calls if c.domain == domain]
        scored = [c for c in mine if c.status is not Status.INFRA_ERROR]
        domains[domain] = DomainAccuracy(len(scored), sum(c.status is Status.CORRECT for c in scored),
                                         len(mine) - len(scored))
    answered = [c for c in calls if c.answered]
    timed = [c.latency_s for c in answered if c.retries == 0] or [c.latency_s for c in answered]
    mean_ms, sigma = lognormal_fit(timed)

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else 0.0

    return WorkerFit(
        worker=worker, domains=domains, answered=len(answered),
        prompt_tokens=mean([c.prompt_tokens for c in answered]),
        visible_tokens=mean([c.completion_tokens - c.reasoning_tokens for c in answered]),
        hidden_tokens=mean([c.reasoning_tokens for c in answered]),
        latency_ms=mean_ms, latency_sigma=sigma,
        median_latency_ms=1000 * statistics.median(timed) if timed else 0.0,
        cost_usd=mean([c.cost_usd for c in answered]), retried=sum(c.retries > 0 for c in answered))


def lognormal_fit(latencies_s: Sequence[float]) -> tuple[float, float]:
    """(mean in ms, sigma) of the log-normal fitted to ``latencies_s`` by its log moments: the simulator
    draws ``lognormvariate(log(mean) - sigma^2 / 2, sigma)``, so these two numbers reproduce the fit."""
    logs = [math.log(max(seconds, 1e-6)) for seconds in latencies_s]
    if not logs:
        return 0.0, 0.0
    sigma = statistics.pstdev(logs) if len(logs) > 1 else 0.0
    return 1000 * math.exp(statistics.fmean(logs) + sigma ** 2 / 2), sigma
