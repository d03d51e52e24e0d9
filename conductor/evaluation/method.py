"""One interface for every method the evaluation compares: ``await method.attempt(task, repeat)``.

A method gets a ``MethodContext`` (the pool's workers in their configured order, an executor over the
pool, a seed) and returns an ``Attempt``; the harness times, verifies and records it. ``build_methods``
turns the names a user writes in ``evaluate.methods`` into methods; a name without ``:<worker>`` expands to
one method per worker (``single`` -> ``single:gpt-5``, ...); a pair method is always named in full
(``solve_check:gemini-2.5-pro>claude-sonnet-4``). ``conductor`` and ``conductor_recursive`` need
a trained policy in the context (``evaluate.policy``); ``domain_table`` a table (``evaluate.domain_table``),
whose rows cluster/evaluate.py adds to the methods run.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from conductor.config import VerifierConfig
from conductor.evaluation.conductor_method import CONDUCTOR_METHODS, ConductorMethod, ConductorPolicy, conductor_label
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.routing_table import RoutingTable, collect_routing_table
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.tasks.task import Task

PER_WORKER = ("single", "self_reflection", "consensus")
PAIRS = ("solve_check",)  # <kind>:<first>><second>, always named: every ordered pair would be 49 rows on paper-7
POOL_WIDE = ("random", "moa", "smoothie_dependent", "smoothie_independent", "router_dc", "masrouter",
             "rllib_router")
DERIVED = ("oracle", "domain_table")  # computed from other methods' rows (report.py, domain_table.py)
TRAINED = ("router_dc", "masrouter", "rllib_router")  # learn on MethodContext.train_tasks
KNOWN = PER_WORKER + PAIRS + POOL_WIDE + CONDUCTOR_METHODS + DERIVED


class Method(Protocol):
    name: str

    async def attempt(self, task: Task, repeat: int) -> Attempt: ...


@dataclass(frozen=True)
class MethodContext:
    roster: Roster
    executor: WorkflowExecutor
    seed: int = 0
    conductor: Optional[ConductorPolicy] = None
    train_tasks: tuple[Task, ...] = ()  # what the trained routers learn from (disjoint from the scored split)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)
    shared: dict[str, Any] = field(default_factory=dict)  # computed once for several methods (routing table)
    factories: dict[str, Callable[[str, MethodContext], Method]] = field(default_factory=dict)  # outside the core

    async def routing_table(self, limit: asyncio.Semaphore) -> RoutingTable:
        """Every worker's verified answer to every training question (conductor/evaluation/routing_table.py),
        collected on first use and shared by the routers."""
        if "routing_table" not in self.shared:
            self.shared["routing_table"] = asyncio.ensure_future(
                collect_routing_table(self.train_tasks, self.roster, self.executor, self.verifier, limit))
        return await self.shared["routing_table"]


def build_methods(names: list[str], context: MethodContext) -> list[Method]:
    """Methods in the order named; raises ValueError naming an unknown method or worker."""
    from conductor.evaluation import fixed_methods as fixed

    workers = list(context.roster.worker_ids)
    if any(name in TRAINED for name in names) and not context.train_tasks:
        raise ValueError(f"the trained routers ({', '.join(TRAINED)}) learn on the train split: evaluate on "
                         "evaluate.split=heldout (or val), not 'all'")
    methods: list[Method] = []
    for name in names:
        kind, _, worker = name.partition(":")
        if kind not in KNOWN:
            raise ValueError(f"unknown method {kind!r}; known: {', '.join(KNOWN)}")
        if kind in DERIVED:
            continue
        if kind in CONDUCTOR_METHODS:
            if worker:
                raise ValueError(f"method {kind!r} chooses its own workers; it takes no ':<worker>'")
            if context.conductor is None:
                raise ValueError(f"method {kind!r} needs a trained policy: set evaluate.policy")
            rounds = context.conductor.max_rounds if kind == "conductor_recursive" else 0
            methods.append(ConductorMethod(conductor_label(context.conductor.name, kind), context.roster,
                                           context.conductor, rounds))
            continue
        if kind in POOL_WIDE:
            if worker:
                raise ValueError(f"method {kind!r} uses the whole pool; it takes no ':<worker>'")
            methods.append(_pool_wide(kind, context))
            continue
        if kind in PAIRS:
            methods.append(_pair(name, workers, context))
            continue
        if worker:
            _check_worker(name, worker, workers)
        cls = {"single": fixed.SingleWorker, "self_reflection": fixed.SelfReflection,
               "consensus": fixed.Consensus}[kind]
        methods += [cls(f"{kind}:{w}", context, workers.index(w)) for w in ([worker] if worker else workers)]
    if "oracle" in names and not any(m.name.startswith("single:") for m in methods):
        methods += [fixed.SingleWorker(f"single:{w}", context, i) for i, w in enumerate(workers)]
    unique: dict[str, Method] = {}
    for method in methods:
        unique.setdefault(method.name, method)
    return list(unique.values())


def _check_worker(name: str, worker: str, workers: list[str]) -> None:
    if worker not in workers:
        raise ValueError(f"method {name!r}: no worker {worker!r} in the pool ({', '.join(workers)})")


def _pair(name: str, workers: list[str], context: MethodContext) -> Method:
    """Worker ids cannot contain '>' (conductor/config.py), so the pair splits one way only."""
    from conductor.evaluation.fixed_methods import SolveThenCheck

    kind, _, pair = name.partition(":")
    first, sep, second = pair.partition(">")
    if not sep:
        raise ValueError(f"method {kind!r} takes two workers in order: {kind}:<solver>><checker>")
    for worker in (first, second):
        _check_worker(name, worker, workers)
    return SolveThenCheck(name, context, workers.index(first), workers.index(second))


def _pool_wide(kind: str, context: MethodContext) -> Method:
    from conductor.evaluation import fixed_methods as fixed

    if kind in context.factories:
        return context.factories[kind](kind, context)
    if kind == "random":
        return fixed.RandomRouter(kind, context)
    if kind == "moa":
        return fixed.MixtureOfAgents(kind, context)
    if kind.startswith("smoothie"):
        from conductor.evaluation.smoothie import Smoothie

        return Smoothie(kind, context, dependent=kind == "smoothie_dependent")
    if kind == "router_dc":
        from conductor.evaluation.router_dc import RouterDC

        return RouterDC(kind, context)
    if kind == "masrouter":
        from conductor.evaluation.mas_router import MasRouter

        return MasRouter(kind, context)
    raise ValueError(f"method {kind!r} runs on Ray: use `python -m cluster.evaluate`")
