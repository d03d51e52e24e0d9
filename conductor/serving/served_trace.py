"""What one served request leaves behind: its usage (the Conductor's tokens and the workers' apart, and the
cost) and its trace, the audit trail of the workflow that answered: each round's Conductor output and
workflow, each step's worker, subtask, access list, tokens, latency, cost and status, any cut or
fallback and why, the cost dial's setting (a dial policy's), and where the time went.

Time: ``overhead_s`` is the request's time beyond the Conductor's generation and the workers' critical
path (the longest chain of step latencies through the access lists; steps that run side by side count
once). It is what the endpoint itself adds, the figure bench/serve_load.py reports.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from conductor.trace import RoundTrace, StepTrace
from conductor.workflow import Workflow


@dataclass
class Usage:
    """``cost_usd``: what the workers billed, failed attempts with usage included. ``unsettled_cost_usd_max``:
    at most this much more, for attempts sent whose bill is unknown (a timeout, a dropped connection, a step
    cancelled in flight), each at its step's worst case (cost_bounds.py); a cost cap counts both."""

    conductor_prompt_tokens: int = 0
    conductor_completion_tokens: int = 0
    worker_prompt_tokens: int = 0
    worker_completion_tokens: int = 0
    cost_usd: float = 0.0
    unsettled_cost_usd_max: float = 0.0
    worker_calls: int = 0

    def add_step(self, step: StepTrace, worst_case_usd: float, *, in_flight: bool = False) -> None:
        """A worker call that ended, answered or failed; ``worst_case_usd``: what one attempt of it can cost;
        ``in_flight``: it was cancelled while it may have been at the provider."""
        self.worker_prompt_tokens += step.tokens_in
        self.worker_completion_tokens += step.tokens_out
        self.cost_usd += step.cost_usd + step.failed_attempts_usd
        self.unsettled_cost_usd_max += (step.unsettled_attempts + in_flight) * worst_case_usd
        self.worker_calls += step.error is None

    @property
    def spent_at_most(self) -> float:
        return self.cost_usd + self.unsettled_cost_usd_max

    @property
    def prompt_tokens(self) -> int:
        return self.conductor_prompt_tokens + self.worker_prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.conductor_completion_tokens + self.worker_completion_tokens

    def breakdown(self) -> dict[str, Any]:
        """The extension fields both APIs' ``usage`` carry (orchestration tokens, as Fugu reports them)."""
        conductor = self.conductor_prompt_tokens + self.conductor_completion_tokens
        workers = self.worker_prompt_tokens + self.worker_completion_tokens
        return {"conductor_tokens": conductor, "worker_tokens": workers, "orchestration_tokens": conductor + workers,
                "conductor": {"prompt_tokens": self.conductor_prompt_tokens,
                              "completion_tokens": self.conductor_completion_tokens},
                "workers": {"prompt_tokens": self.worker_prompt_tokens,
                            "completion_tokens": self.worker_completion_tokens, "calls": self.worker_calls},
                "cost_usd": round(self.cost_usd, 8), "unsettled_cost_usd_max": round(self.unsettled_cost_usd_max, 8)}


def workflow_json(workflow: Workflow, worker_ids: list[str]) -> list[dict[str, Any]]:
    """The workflow as written, each step's shown index turned back into the worker it names."""
    return [{"worker": worker_ids[step.worker], "subtask": step.subtask,
             "access": step.access if isinstance(step.access, str) else list(step.access)}
            for step in workflow.steps]


def step_json(step: StepTrace) -> dict[str, Any]:
    return {"index": step.index, "worker": step.worker_id, "subtask": step.subtask,
            "access": step.access if isinstance(step.access, str) else list(step.access),
            "visible": list(step.visible), "status": "ok" if step.error is None else "error",
            "tokens_in": step.tokens_in, "tokens_out": step.tokens_out, "latency_s": round(step.latency_s, 4),
            "cost_usd": round(step.cost_usd, 8), "failed_attempts_usd": round(step.failed_attempts_usd, 8),
            "unsettled_attempts": step.unsettled_attempts, "retries": step.retries, "error": caller_error(step),
            "output": step.response}


def caller_error(step: StepTrace) -> Optional[str]:
    """A failed step as a caller sees it: the worker and the kind of failure. The provider's own words stay
    in the server's log: they can carry the operator's organisation id or a masked key."""
    if step.error is None or step.error_kind is None:
        return step.error  # None, or "not run: ...", written by the executor
    return f"worker {step.worker_id}: {step.error_kind}"


def critical_path_s(steps: list[StepTrace]) -> float:
    finish: dict[int, float] = {}
    for step in sorted(steps, key=lambda s: s.index):
        finish[step.index] = step.latency_s + max((finish.get(j, 0.0) for j in step.visible), default=0.0)
    return max(finish.values(), default=0.0)


def round_status(trace: RoundTrace) -> str:
    """ok | accepted_previous | parse_error | skipped | failed"""
    if trace.parse_error is not None:
        return "parse_error"
    if trace.accepted_previous:
        return "accepted_previous"
    if trace.skipped:
        return "skipped"
    return "failed" if trace.infra_error else "ok"


def round_json(trace: RoundTrace, worker_ids: list[str]) -> dict[str, Any]:
    """The API's shape of an episode's round (conductor/trace.py), its field names kept as served."""
    parse_error = f"{trace.parse_error.value}: {trace.parse_detail}" if trace.parse_error is not None else None
    return {"round": trace.round, "conductor_output": trace.conductor_text, "parse_error": parse_error,
            "workflow": workflow_json(trace.workflow, worker_ids) if trace.workflow else [],
            "status": round_status(trace), "notes": trace.notes, "steps": [step_json(s) for s in trace.steps]}


@dataclass
class ServedTrace:
    model: str
    workers_allowed: list[str]  # the request's roster, in the order its workflows name them
    limits: dict[str, Any]
    rounds: list[RoundTrace] = field(default_factory=list)
    fallback: Optional[dict[str, Any]] = None
    conductor_s: float = 0.0
    cost_quality: Optional[int] = None  # the cost dial's setting the Conductor was given; None: no dial

    def json(self, usage: Usage, total_s: float) -> dict[str, Any]:
        workers_s = sum(critical_path_s([s for s in r.steps if s.response is not None]) for r in self.rounds)
        return {"model": self.model, "workers_allowed": self.workers_allowed, "limits": self.limits,
                "cost_quality": self.cost_quality,
                "rounds": [round_json(r, self.workers_allowed) for r in self.rounds], "fallback": self.fallback,
                "usage": usage.breakdown(),
                "timing": {"total_s": round(total_s, 4), "conductor_s": round(self.conductor_s, 4),
                           "workers_critical_path_s": round(workers_s, 4),
                           "overhead_s": round(max(0.0, total_s - self.conductor_s - workers_s), 5)}}
