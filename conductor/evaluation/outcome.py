"""The evaluation's contracts: what a method returns for one question (``Attempt``), and the row the
harness keeps for it once it is scored (``Outcome``: one Parquet row, one entry of the report). An attempt
is scored as training scores an episode (conductor/episode_score.py): an infrastructure error, a worker's
or the verifier's, is ``correct=None`` with its reason in ``error``, never a wrong answer.

Every method reaches workers through the same executor and pool, so calls, tokens, dollars and latency
are counted the same way for all of them: from the step traces. A judge's calls, tokens and dollars (a
judged kind, conductor/verifiers/judge.py) are the ``judge_*`` fields, in none of the workers' figures.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from conductor.episode_score import EpisodeScore
from conductor.trace import StepTrace, steps_cost_usd, steps_worker_tokens

RECURSIVE_TURN = "recursive_turn:"  # prefixes a parse error of a recursive turn, whose root answer stands


def answer_stands(parse_error: Optional[str]) -> bool:
    return parse_error is None or parse_error.startswith(RECURSIVE_TURN)


@dataclass
class Attempt:
    answer: Optional[str]
    steps: list[StepTrace] = field(default_factory=list)
    infra_error: Optional[str] = None
    conductor_tokens: int = 0
    rounds: int = 1  # workflows executed (a recursive conductor may run more than one)
    parse_error: Optional[str] = None  # a conductor's output that was not a workflow (RECURSIVE_TURN: a later turn's)
    fallback: bool = False  # the answer came from a fallback, not from the method's own plan
    accepted: bool = False  # a recursive turn accepted the previous round's answer (three empty lists)
    latency_s: Optional[float] = None  # set by methods whose calls ran in prepare(): the question's own time

    @classmethod
    def alone(cls, step: StepTrace) -> Attempt:
        """One step's own answer, as if its worker had been asked alone (the routers' tables)."""
        return cls(answer=step.response, steps=[step],
                   infra_error=None if step.response is not None else step.error or "no response")

    @property
    def format_ok(self) -> bool:
        """The answer stands as the method's own: a recursive turn that failed to parse leaves it standing."""
        return answer_stands(self.parse_error)

    @property
    def cost_usd(self) -> float:
        return steps_cost_usd(self.steps)

    @property
    def worker_tokens(self) -> int:
        return steps_worker_tokens(self.steps)


@dataclass(frozen=True)
class Outcome:
    method: str
    task_id: str
    domain: str
    repeat: int
    correct: Optional[bool]  # None: an infrastructure error, never counted as a wrong answer
    worker_calls: int
    worker_prompt_tokens: int
    worker_completion_tokens: int
    conductor_tokens: int
    usd: float
    latency_s: float
    steps: int
    rounds: int
    workers: tuple[str, ...]  # in step order, repeats kept
    access: tuple[str, ...]  # each step's access list as written: "all", "[]", "[0, 1]"
    parse_error: Optional[str] = None
    fallback: bool = False
    error: Optional[str] = None
    accepted: bool = False  # a recursive turn accepted the previous answer (absent in older outcome files)
    judge_calls: int = 0  # scoring by a judge worker (absent in older outcome files)
    judge_tokens: int = 0
    judge_usd: float = 0.0
    score: Optional[float] = None  # a graded verdict in [0, 1] (a Python reward, a judge); None: right/wrong

    @property
    def worker_tokens(self) -> int:
        return self.worker_prompt_tokens + self.worker_completion_tokens

    @property
    def format_ok(self) -> bool:
        """As ``Attempt.format_ok``: a recursive turn that failed to parse leaves the answer standing."""
        return answer_stands(self.parse_error)

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Outcome:
        """One row of an outcomes.parquet, as ``row()`` wrote it."""
        return cls(**{**row, "workers": tuple(row["workers"]), "access": tuple(row["access"])})

    def row(self) -> dict[str, Any]:
        row = asdict(self)
        row["workers"], row["access"] = list(self.workers), list(self.access)
        return row


def outcome_of(method: str, task_id: str, domain: str, repeat: int, attempt: Attempt, score: EpisodeScore,
               latency_s: float) -> Outcome:
    ran = [s for s in attempt.steps if s.response is not None]
    failed = [s for s in attempt.steps if s.response is None and s.error and not s.error.startswith("not run")]
    return Outcome(
        method=method, task_id=task_id, domain=domain, repeat=repeat,
        correct=score.judged,
        worker_calls=len(ran) + len(failed), worker_prompt_tokens=sum(s.tokens_in for s in ran),
        worker_completion_tokens=sum(s.tokens_out for s in ran), conductor_tokens=attempt.conductor_tokens,
        usd=steps_cost_usd(ran), latency_s=latency_s, steps=len(attempt.steps), rounds=attempt.rounds,
        workers=tuple(s.worker_id for s in attempt.steps),
        access=tuple(_access_text(s.access) for s in attempt.steps),
        parse_error=attempt.parse_error, fallback=attempt.fallback, error=score.infra_error,
        accepted=attempt.accepted, judge_calls=score.judge.calls, judge_tokens=score.judge.tokens,
        judge_usd=score.judge.cost_usd, score=score.score)


def _access_text(access: Any) -> str:
    return "all" if access == "all" else "[" + ", ".join(map(str, access)) + "]"
