"""What an episode leaves behind: per-step and per-round traces (the rollout record and the endpoint's trace
are built from these)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Optional

from conductor.workflow import Access, ParseFailure, Workflow


@dataclass
class StepTrace:
    round: int
    index: int
    shown_worker: int
    worker_id: str
    subtask: str
    access: Access
    visible: tuple[int, ...]
    response: Optional[str] = None
    tokens_in: int = 0
    tokens_out: int = 0
    reasoning_tokens: int = 0  # hidden, within tokens_out
    latency_s: float = 0.0
    cost_usd: float = 0.0  # the answer's: what the workflow's choice cost (the reward prices this)
    failed_attempts_usd: float = 0.0  # billed besides, for attempts that failed (a failed step's too)
    unsettled_attempts: int = 0  # sent with their bill unknown (a timeout, a dropped connection)
    retries: int = 0
    error: Optional[str] = None
    error_kind: Optional[str] = None  # WorkerCallError.kind: what a caller of the endpoint is shown
    finish_reason: Optional[str] = None

    def same_outcome(self, other: StepTrace) -> bool:
        """Equal in everything but wall-clock latency."""
        mine, theirs = dict(vars(self)), dict(vars(other))
        mine.pop("latency_s"), theirs.pop("latency_s")
        return mine == theirs


def steps_cost_usd(steps: Iterable[StepTrace]) -> float:
    """What the workers of these steps charged: an episode's or an evaluation attempt's cost."""
    return sum(s.cost_usd for s in steps)


def steps_worker_tokens(steps: Iterable[StepTrace]) -> int:
    """Prompt plus completion tokens of these steps' worker calls (what a token price is charged on)."""
    return sum(s.tokens_in + s.tokens_out for s in steps)


@dataclass
class RoundTrace:
    """One round of an episode, in training and serving alike (the endpoint's trace maps it to its JSON).
    ``workflow`` is the one that ran (as written, less any cut the notes record; as written when none of it
    could run, ``skipped``). ``conductor_text`` is None for a round no Conductor turn wrote (a fallback)."""
    round: int
    conductor_text: Optional[str]
    workflow: Optional[Workflow] = None
    parse_error: Optional[ParseFailure] = None
    parse_detail: Optional[str] = None
    accepted_previous: bool = False
    skipped: bool = False  # a caller's cut (a cost cap) left no step to run
    notes: list[str] = field(default_factory=list)  # each cut and why
    steps: list[StepTrace] = field(default_factory=list)
    answer: Optional[str] = None
    infra_error: Optional[str] = None
    infra_error_kind: Optional[str] = None  # WorkerCallError.kind of the first failed step
