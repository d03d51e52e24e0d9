"""One place scores an episode: its answer verified, then correct, wrong, or an infrastructure error, with
the training reward, the worker tokens and the dollars it spent.

Training (conductor/rollout.py), evaluation (conductor/evaluation/harness.py, its routers' tables), the
demo and the benchmarks all score here, so an infrastructure error means one thing everywhere: a worker
call that failed, a Conductor prompt with no room left, or a verifier that could not judge (a sandbox that
refused to run for missing isolation, or failed to start; a user's Python reward that raised or returned no
score in [0, 1]). It is unscored (no reward, never a wrong
answer), counted, and out of accuracy's denominator.

An episode reaches the verifier only when it has an answer, parsed in every round and met no
infrastructure error; anything else that is not an infrastructure error is wrong (a format error gets
``reward.format_error``; conductor/rewards.py).

A judged kind (``verifier: judge``; its registry entry says ``judged``) is graded by a worker of the pool:
the scorer awaits its ``judge`` (conductor/verifiers/judge.py, bound to the pool by the rollout runner and
the evaluation harness) instead of verifying on a thread. What the judge spent is the score's ``judge``
usage, kept apart from the workers' tokens and dollars, which alone enter the reward's cost penalties.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Optional, Protocol

from conductor.config import VerifierConfig
from conductor.pool import ReplayMiss
from conductor.rewards import RewardConfig, reward
from conductor.tasks.task import Task
from conductor.verifiers import registry
from conductor.verifiers.judge import NO_JUDGE_CALLS, Judge, JudgeUsage
from conductor.verifiers.verdict import Verdict
from conductor.verifiers.verify import verify

log = logging.getLogger(__name__)
VERIFIER_ERROR = "verifier: "  # prefixes the reason of an infrastructure error the verifier reported


class Status(enum.Enum):
    CORRECT = "correct"
    WRONG = "wrong"
    INFRA_ERROR = "infra_error"


class Episode(Protocol):
    """What scoring reads of an episode: training's EpisodeResult (conductor/episode.py) and evaluation's
    Attempt (conductor/evaluation/outcome.py) both have it. ``format_ok``: the answer stands as the
    episode's own (no workflow that failed to parse where it counts)."""

    @property
    def answer(self) -> Optional[str]: ...

    @property
    def format_ok(self) -> bool: ...

    @property
    def infra_error(self) -> Optional[str]: ...

    @property
    def cost_usd(self) -> float: ...

    @property
    def worker_tokens(self) -> int: ...


@dataclass(frozen=True)
class EpisodeScore:
    status: Status
    reward: Optional[float]  # None exactly for an infrastructure error: nothing to train on
    format_ok: bool
    worker_tokens: int
    cost_usd: float
    infra_error: Optional[str] = None  # why it is unscored
    verdict: Optional[Verdict] = None  # None: the answer never reached the verifier
    verify_s: float = 0.0
    score: Optional[float] = None  # a plug-in's verdict in [0, 1] (Python, server, judge): the reward interpolates it
    judge: JudgeUsage = NO_JUDGE_CALLS  # what a judge worker spent on this answer (not in worker_tokens, cost_usd)

    @property
    def correct(self) -> bool:
        return self.status is Status.CORRECT

    @property
    def scored(self) -> bool:
        return self.status is not Status.INFRA_ERROR

    @property
    def judged(self) -> Optional[bool]:
        """Right or wrong for accuracy; None for an infrastructure error (out of the denominator)."""
        return self.correct if self.scored else None


def reaches_verifier(episode: Episode) -> bool:
    return episode.infra_error is None and episode.format_ok and bool(episode.answer)


def score_of(episode: Episode, verdict: Optional[Verdict], rewards: Optional[RewardConfig] = None,
             verify_s: float = 0.0, judge: JudgeUsage = NO_JUDGE_CALLS,
             cost_weight: Optional[float] = None) -> EpisodeScore:
    """The score given the verdict on the episode's answer (ignored unless it reached the verifier);
    ``cost_weight``: the question's price of a dollar under the cost dial (conductor/cost_dial.py)."""
    if not reaches_verifier(episode):
        verdict = None
    infra_error = episode.infra_error or (VERIFIER_ERROR + verdict.infra_error
                                          if verdict is not None and verdict.infra_error else None)
    correct = infra_error is None and verdict is not None and verdict.correct
    score = verdict.score if infra_error is None and verdict is not None else None
    status = Status.INFRA_ERROR if infra_error else Status.CORRECT if correct else Status.WRONG
    value = reward(format_ok=episode.format_ok, correct=correct, cost_usd=episode.cost_usd,
                   worker_tokens=episode.worker_tokens, infra_error=infra_error is not None, settings=rewards,
                   score=score, cost_weight=cost_weight)
    return EpisodeScore(status, value, episode.format_ok, episode.worker_tokens, episode.cost_usd, infra_error,
                        verdict, verify_s, score, judge)


SANDBOX_THREADS = 2  # code answers each run a sandbox: more at once than the cores only queues them


def scoring_threads(tasks: Sequence[Task], settings: Optional[VerifierConfig] = None) -> int:
    """How many threads a scorer that owns its own (evaluation, calibration) verifies on: two for code
    answers, more where a plug-in waits on I/O on its thread: a reward server's checks share a POST only
    while they wait together (up to its ``batch_size``), a Python reward runs up to its
    ``python_reward_threads`` calls at once."""
    settings = settings or VerifierConfig()
    wanted = [SANDBOX_THREADS]
    for task in tasks:
        if task.reward_server is not None:
            wanted.append(task.reward_server.batch_size)
        elif task.reward_function is not None:
            wanted.append(settings.python_reward_threads)
    return max(wanted)


class EpisodeScorer:
    """Scores episodes, verifying off the event loop (code runs in the sandbox for seconds) on ``threads``
    (None: the loop's default executor), and awaiting ``judge`` for a judged kind. With ``cache``, one
    verdict per (question, answer) for this scorer's life, since many attempts give the same answer (the
    first attempt is charged the judge's calls, the others reuse them free); its futures belong to one
    event loop."""

    def __init__(self, verifier: Optional[VerifierConfig] = None, rewards: Optional[RewardConfig] = None, *,
                 threads: Optional[Executor] = None, cache: bool = False, judge: Optional[Judge] = None):
        self.verifier = verifier or VerifierConfig()
        self.rewards = rewards or RewardConfig()
        self.threads = threads
        self.judge = judge
        self._verdicts: Optional[dict[tuple[str, str], asyncio.Future]] = {} if cache else None

    async def score(self, task: Task, episode: Episode, cost_weight: Optional[float] = None) -> EpisodeScore:
        if not reaches_verifier(episode):
            return score_of(episode, None, self.rewards, cost_weight=cost_weight)
        started = time.perf_counter()
        verdict, spent = await self._verdict(task, episode.answer or "")
        return score_of(episode, verdict, self.rewards, time.perf_counter() - started, spent, cost_weight)

    def score_now(self, task: Task, episode: Episode) -> EpisodeScore:
        """The same, verified on this thread (no event loop: the demo; a judged kind is then unscored)."""
        if not reaches_verifier(episode):
            return score_of(episode, None, self.rewards)
        started = time.perf_counter()
        verdict = verify(task, episode.answer or "", self.verifier)
        return score_of(episode, verdict, self.rewards, time.perf_counter() - started)

    async def _verdict(self, task: Task, answer: str) -> tuple[Verdict, JudgeUsage]:
        if self._verdicts is None:
            return await self._check(task, answer)
        key = (task.id, answer)
        future = self._verdicts.get(key)
        if future is None:
            future = self._verdicts[key] = asyncio.ensure_future(self._check(task, answer))
            verdict, spent = await future
            if verdict.infra_error is not None and self._verdicts.get(key) is future:
                del self._verdicts[key]  # a transient failure (a 429, a timeout): the next attempt asks again
            return verdict, spent
        verdict, _ = await future
        return verdict, NO_JUDGE_CALLS

    async def _check(self, task: Task, answer: str) -> tuple[Verdict, JudgeUsage]:
        """The verdict; a verifier that raises (a plug-in's bug) is an infrastructure error of this answer,
        never the end of the batch or evaluation that scores it."""
        try:
            if self.judge is not None and self._judged(task):
                judgement = await self.judge.judge(task, answer)
                return judgement.verdict, judgement.usage
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self.threads, verify, task, answer, self.verifier), NO_JUDGE_CALLS
        except ReplayMiss:  # the judge's call has no cached answer: the replay stops, no verdict is made up
            raise
        except Exception as exc:  # whatever a verifier raises; its text may quote a URL or key: the type only
            log.warning("verifier %s raised %s on task %s", task.verifier, type(exc).__name__, task.id)
            return Verdict(False, infra_error=f"the {task.verifier} verifier raised {type(exc).__name__}"), \
                NO_JUDGE_CALLS

    @staticmethod
    def _judged(task: Task) -> bool:
        try:
            return registry.get(task.verifier).by_judge
        except registry.UnknownVerifier:  # verify() says so, naming the task
            return False
