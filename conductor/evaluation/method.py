"""One interface for every method the evaluation compares: ``await method.attempt(task, repeat)``.

A method gets a ``MethodContext`` (the pool's workers in their configured order, an executor over the
pool, a seed) and returns an ``Attempt``; the harness times, verifies and records it. A method may also
have ``async prepare(tasks, repeats, limit)``, called once before its attempts (see every question first,
or train on ``train_tasks``). Which names exist and how each is built is conductor/evaluation/registry.py's
to say; this module imports no method, so every method can import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional, Protocol

from conductor.config import EvaluateConfig, VerifierConfig
from conductor.evaluation.outcome import Attempt
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.tasks.task import Task
from conductor.verifiers.judge import Judge

if TYPE_CHECKING:
    from conductor.evaluation.conductor_method import ConductorPolicy


class Method(Protocol):
    name: str

    async def attempt(self, task: Task, repeat: int) -> Attempt: ...


@dataclass(frozen=True)
class MethodContext:
    roster: Roster
    executor: WorkflowExecutor
    seed: int = 0
    conductor: Optional[ConductorPolicy] = None  # the trained policy of the conductor methods (evaluate.policy)
    train_tasks: tuple[Task, ...] = ()  # what the trained routers learn from (disjoint from the scored split)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    shared: dict[str, Any] = field(default_factory=dict)  # computed once for several methods (routing table)
    settings: EvaluateConfig = field(default_factory=EvaluateConfig)  # a method's own knobs (rllib_iterations)
    judge: Optional[Judge] = None  # grades judged kinds, a worker of the same pool (the routers score with it)
