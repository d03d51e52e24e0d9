"""One registry of verifiers: each name a task can carry (``Task.verifier``, a dataset's ``verifier:``)
maps to a VerifierSpec that says all the rest of the code needs to know about answers of that kind: how
one is scored, its stated value and normal form (votes, the simulator), the answer-format instruction a
prompt gets by default, and how the simulated workers word one.

A built-in verifier is one module in conductor/verifiers/kinds/ that declares ``SPECS`` and one line in
BUILTIN_MODULES below. The modules are imported on the first lookup, not when this module loads: they
import this module (for VerifierSpec), and what imports them stays free of import circles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Optional

from pydantic import AfterValidator

from conductor.lazy_registry import LazyRegistry

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task
    from conductor.verifiers.verdict import Verdict

BUILTIN_MODULES = (  # in this order the names appear in messages
    "conductor.verifiers.kinds.boxed_math",
    "conductor.verifiers.kinds.choice",
    "conductor.verifiers.kinds.number",
    "conductor.verifiers.kinds.text",
    "conductor.verifiers.kinds.code",
    "conductor.verifiers.kinds.user_function",
    "conductor.verifiers.kinds.judge",
    "conductor.verifiers.kinds.reward_server",
)


def answer_line(value: str) -> str:
    return f"Answer: {value}"


@dataclass(frozen=True)
class SimulatedAnswer:
    """How the simulator's workers word an answer of this kind (conductor/simulator/render.py). The worded
    answers are seeded, so any change here moves every committed simulator result."""

    render: Callable[[str], str] = answer_line  # the stated value -> the close of the reply, after its working
    lead: str = ""  # a solver's first line
    # (task, correct, draw) -> the value a worker states alone; None: the gold, else a near miss (render.py)
    value: Optional[Callable[[Task, bool, float], str]] = None


@dataclass(frozen=True)
class VerifierSpec:
    """Everything about one verifier kind. ``check`` gets a non-empty response and never raises for what is
    in it; ``final_value``/``answer_key``/``is_right`` compare answers with no sandbox (conductor/verifiers/
    answer_key.py); ``reference`` and ``meta`` are what a dataset's field map must supply."""

    name: str
    check: Callable[[Task, str, VerifierConfig], Verdict]
    final_value: Callable[[Task, str], Optional[str]]  # the answer a text states, as written (None: none)
    answer_key: Callable[[Task, str], str]  # a normal form: equal keys, the same answer
    instruction: str  # appended to a dataset's prompts unless its entry gives its own
    reference: bool = True  # scores against Task.answer, so a field map must name an answer column
    meta: tuple[str, ...] = ()  # the Task.meta keys ``check`` reads
    is_right: Optional[Callable[[Task, str], bool]] = None  # None: the same answer_key as the gold's
    simulated: SimulatedAnswer = field(default_factory=SimulatedAnswer)
    # scored by a judge worker through the pool (conductor/verifiers/judge.py), awaited by the scorer in place
    # of ``check``, which then only answers where no judge is bound
    by_judge: bool = False
    # what is wrong with a reference no answer could match (None: nothing), checked as a dataset loads
    reference_problem: Optional[Callable[[str], Optional[str]]] = None


class UnknownVerifier(ValueError):
    pass


_REGISTRY: LazyRegistry[VerifierSpec] = LazyRegistry("verifier", BUILTIN_MODULES)


def register(spec: VerifierSpec) -> VerifierSpec:
    """Add a verifier beside the built-in ones (a name already taken is refused)."""
    return _REGISTRY.register(spec)


def names() -> tuple[str, ...]:
    return _REGISTRY.names()


def get(name: str) -> VerifierSpec:
    spec = _REGISTRY.find(name)
    if spec is None:
        raise UnknownVerifier(f"{name!r} is not a verifier; known: {', '.join(names())}")
    return spec


def known_name(name: str) -> str:
    """A config's verifier name, checked against the registry (pydantic names the setting)."""
    get(name)
    return name


VerifierKind = Annotated[str, AfterValidator(known_name)]
