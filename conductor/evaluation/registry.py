"""One registry of evaluation methods: each name a user writes in ``evaluate.methods`` maps to a MethodSpec
that says how the method is built and what its name takes after ``:`` (nothing, one worker, or a pair).

A built-in method is one module of conductor/evaluation/ that declares ``SPECS`` and one line in
BUILTIN_MODULES below; a plug-in calls ``register()`` before its config is loaded (the config checks method
names here). The modules are imported on the first lookup, not when this module loads: they import this
module (for MethodSpec) and method.py (for MethodContext), and nothing here imports them back, so adding
a method adds no import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal, Optional

from pydantic import AfterValidator

from conductor.lazy_registry import LazyRegistry

if TYPE_CHECKING:
    from conductor.evaluation.method import Method, MethodContext

BUILTIN_MODULES = (  # in this order the names appear in messages
    "conductor.evaluation.fixed_methods",  # single, self_reflection, consensus, solve_check, random, moa
    "conductor.evaluation.smoothie",
    "conductor.evaluation.router_dc",
    "conductor.evaluation.mas_router",
    "conductor.evaluation.rllib_router",
    "conductor.evaluation.conductor_method",  # conductor, conductor_recursive
    "conductor.evaluation.report",  # oracle
    "conductor.evaluation.domain_table",
)


@dataclass(frozen=True)
class MethodSpec:
    """How one method is built: ``build(name, context, *workers)`` gets the row's name and the roster indices
    its name gives. ``workers``: ``pool`` (none: the method picks from the whole pool), ``each`` (one:
    ``kind:<worker>``, or one method per worker when no worker is named) or ``pair`` (two, always named:
    ``kind:<first>><second>``, since every ordered pair would be 49 rows on paper-7). ``build=None``: a
    derived row computed from other methods' rows, which ``needs`` names (each run in full: the oracle needs
    every single worker, even where only some were named, e.g. by a domain table's rows)."""

    name: str
    build: Optional[Callable[..., Method]]
    workers: Literal["pool", "each", "pair"] = "pool"
    trained: bool = False  # learns on MethodContext.train_tasks, so the scored split must be another
    routing_table: bool = False  # learns from the one routing table its kind share (measured once for all)
    needs: tuple[str, ...] = ()

    @property
    def derived(self) -> bool:
        return self.build is None


def _check(spec: MethodSpec) -> None:
    if ":" in spec.name:
        raise ValueError(f"method {spec.name!r}: a method's name cannot contain ':'")


_REGISTRY: LazyRegistry[MethodSpec] = LazyRegistry("method", BUILTIN_MODULES, _check)


def register(spec: MethodSpec) -> MethodSpec:
    """Add a method beside the built-in ones (a name already taken is refused)."""
    return _REGISTRY.register(spec)


def names() -> tuple[str, ...]:
    return _REGISTRY.names()


def is_derived(method: str) -> bool:
    """A report row computed from other rows (``oracle``); any other name, known or not, is a method's own."""
    spec = _REGISTRY.find(method)
    return spec is not None and spec.derived


def get(kind: str) -> MethodSpec:
    spec = _REGISTRY.find(kind)
    if spec is None:
        raise ValueError(f"unknown method {kind!r}; known: {', '.join(names())}")
    return spec


def spec_of(name: str) -> MethodSpec:
    """The spec of a name as written (``single``, ``single:gpt-5``, ``solve_check:a>b``), its form checked;
    whether its workers are in the pool is build_methods' to check."""
    kind, colon, workers = name.partition(":")
    spec = get(kind)
    if spec.workers == "pool" and colon:
        raise ValueError(f"method {kind!r} chooses from the whole pool; it takes no ':<worker>'")
    if spec.workers == "pair" and not (workers.partition(">")[1]):
        raise ValueError(f"method {kind!r} takes two workers in order: {kind}:<first>><second>")
    return spec


def known_name(name: str) -> str:
    """A config's method name, checked against the registry (pydantic names the setting)."""
    spec_of(name)
    return name


MethodName = Annotated[str, AfterValidator(known_name)]


def build_methods(requested: Sequence[str], context: MethodContext) -> list[Method]:
    """Methods in the order named, then those a derived row needs; raises ValueError naming an unknown method
    or worker. A name without ``:<worker>`` of an ``each`` method is one method per worker, in roster order."""
    specs = [spec_of(name) for name in requested]
    if any(spec.trained for spec in specs) and not context.train_tasks:
        trained = ", ".join(s.name for s in _REGISTRY.all().values() if s.trained)
        raise ValueError(f"the trained routers ({trained}) learn on the train split: evaluate on "
                         "evaluate.split=heldout (or val), not 'all' or 'train'")
    methods = [m for name, spec in zip(requested, specs) for m in _build(name, spec, context)]
    for need in dict.fromkeys(n for spec in specs for n in spec.needs):
        methods += _build(need, spec_of(need), context)
    unique: dict[str, Method] = {}
    for method in methods:
        unique.setdefault(method.name, method)
    return list(unique.values())


def _build(name: str, spec: MethodSpec, context: MethodContext) -> list[Method]:
    if spec.build is None:
        return []
    pool = list(context.roster.worker_ids)
    written = name.partition(":")[2]

    def index(worker: str) -> int:
        if worker not in pool:
            raise ValueError(f"method {name!r}: no worker {worker!r} in the pool ({', '.join(pool)})")
        return pool.index(worker)

    if spec.workers == "pool":
        return [spec.build(name, context)]
    if spec.workers == "pair":  # worker ids cannot contain '>' (conductor/config.py): one way to split
        first, _, second = written.partition(">")
        return [spec.build(name, context, index(first), index(second))]
    return [spec.build(f"{spec.name}:{w}", context, index(w)) for w in ([written] if written else pool)]
