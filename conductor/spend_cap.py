"""The spend cap's stop rule (``budget`` section), checked by cluster/grpo_recipe.py before every training step.

For each cap in force (``budget.max_usd`` over all providers, ``budget.max_usd_per_provider`` for one), with
``S`` what the run has spent under it so far (every segment, and attempts whose bill is unknown at their worst
case: conductor/spend_meter.py ``at_most``) and the step and
validation costs measured so far (conductor/cost_forecast.py's v and h):

    next    = (1 + a) x max(cost of each of the last RECENT_STEPS steps)  +  [the next step validates] x v
    reserve = h                                      (the closing held-out evaluation of the best policy)
    stop before the next step   if   S + HEADROOM x (next + reserve) > cap   or   S >= cap

``a = min(k, N - n - 1)``, with k ``train.max_staleness``, N the run's steps and n those done: training
asynchronously, rollouts for up to k later steps are already admitted when the run stops, and they run to
their end (a resumed run trains them: cluster/pending_groups.py); none is admitted for a step past the last
(conductor/staleness.py).
``HEADROOM`` (1.5) leaves room for a step half again as costly as the largest recent one, and a held-out
evaluation half again as costly as its estimate (the best policy is not the last one validated, nor are its
questions the validation's).

Before its loop a run measures what it has nothing to project from: the warm start's prior or menu and the
held-out baselines (conductor/setup_cost.py estimates each, roughly). Before each, with ``E`` its estimate:

    stop before the measurement   if   S + HEADROOM x E > cap   or   S >= cap

and the run ends with a line saying so (``SetupStopped``); what was measured before it is kept, and a resumed
run reuses it. The estimates are rough both ways (conductor/setup_cost.py gives paper-7's and the toy's):
a measurement dearer than HEADROOM x its estimate passes the cap by the excess. The same rule, with ``E`` the
loop's reserve h, runs before the closing held-out evaluation: a run the loop stopped reserved it, but a
resumed segment given too little to train stops before its first step and would otherwise pay for it again.
``S`` is read from the pool's counters just before each check, so calls paid since the last step's end (a
step dropped when the learner group was rebuilt) count.

What this guarantees: the run stops before a step that its recent steps say would not fit, keeps its
checkpoint, evaluates and writes its summary. It stays within the cap when the step after the last check
and the held-out evaluation together cost at most HEADROOM x (next + reserve). Otherwise, since the check runs
between steps, the spend passes the cap by at most their excess over that: one step's calls (with the k steps
admitted beside it) and the held-out evaluation's, never more; and when that step alone has eaten the held-out
evaluation's room, the run stops before the evaluation instead, its checkpoint kept, and a resume with a
raised cap evaluates and summarises. Before its first measured step a fresh run
has nothing to project from: step 1 runs unless the cap is already spent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from conductor.cost_forecast import CostHistory, RunShape, heldout_estimate, scaled, validation_estimate
from conductor.spend_meter import ByProvider, add

RECENT_STEPS = 5
HEADROOM = 1.5


def largest(costs: tuple[ByProvider, ...]) -> ByProvider:
    """Per provider and for the whole run (key ``None``), the largest of ``costs``."""
    keys = {provider for cost in costs for provider in cost}
    biggest: dict[Any, float] = {provider: max(cost.get(provider, 0.0) for cost in costs) for provider in keys}
    biggest[None] = max((sum(cost.values()) for cost in costs), default=0.0)
    return biggest


def with_total(costs: Mapping[str, float]) -> dict[Optional[str], float]:
    return {**costs, None: sum(costs.values())}


def cap_setting(provider: Optional[str]) -> str:
    """The setting that holds ``provider``'s cap (None: the whole run's)."""
    return "budget.max_usd" if provider is None else f"budget.max_usd_per_provider.{provider}"


def cap_scope(provider: Optional[str]) -> str:
    return "the run" if provider is None else f"provider {provider}"


@dataclass(frozen=True)
class BudgetStop:
    """Why the run stops before ``before_step``: the figures of the first cap that the projection passes."""

    provider: Optional[str]   # None: the whole run's cap
    before_step: int
    spent: float
    next_step: float
    reserve: float
    cap: float

    @property
    def setting(self) -> str:
        return cap_setting(self.provider)

    def line(self) -> str:
        return (f"budget: stopped before step {self.before_step}: {cap_scope(self.provider)} has spent "
                f"${self.spent:.4f} of ${self.cap:.4f} ({self.setting}); the next step is projected at "
                f"${self.next_step:.4f} and the held-out evaluation at ${self.reserve:.4f}. Raise {self.setting} "
                f"and rerun with --set train.resume=true to go on")

    def summary(self) -> dict[str, Any]:
        return {"stopped": "budget", "stopped_before_step": self.before_step, "stopped_by": self.setting,
                "stopped_projection_usd": {"spent": self.spent, "next_step": self.next_step,
                                           "heldout": self.reserve, "cap": self.cap}}


def next_step_cost(history: CostHistory, done: int, shape: RunShape) -> dict[Optional[str], float]:
    """The projected cost of step ``done + 1`` (its validation included), per provider and in all (``None``)."""
    if not history.steps:
        return {}
    projected = scaled(largest(history.steps[-RECENT_STEPS:]), 1 + shape.steps_admitted_beside(done + 1))
    if shape.validates_after(done + 1):
        validation = with_total(validation_estimate(history, shape))
        projected = {key: projected.get(key, 0.0) + validation.get(key, 0.0) for key in {*projected, *validation}}
    return projected


def budget_stop(caps: Mapping[Optional[str], float], spent: Mapping[str, float], history: CostHistory, done: int,
                shape: RunShape) -> Optional[BudgetStop]:
    """The rule in the module docstring over every cap in ``caps`` (``BudgetConfig.caps()``); None: go on."""
    spent_by = with_total(add(spent))
    projected = next_step_cost(history, done, shape)
    reserve = with_total(heldout_estimate(history, shape)) if history.steps else {}
    for key in sorted(caps, key=lambda k: (k is not None, k or "")):
        have, upcoming, held = spent_by.get(key, 0.0), projected.get(key, 0.0), reserve.get(key, 0.0)
        if have >= caps[key] or have + HEADROOM * (upcoming + held) > caps[key]:
            return BudgetStop(key, done + 1, have, upcoming, held, caps[key])
    return None


@dataclass(frozen=True)
class SetupStop:
    """Why the run stops before a measurement outside its loop: the first cap its estimate would pass."""

    provider: Optional[str]   # None: the whole run's cap
    what: str
    spent: float
    estimate: float
    cap: float
    basis: str = "rough: conductor/setup_cost.py"
    smaller: str = "sft.prior_questions, train.heldout_questions"

    def line(self) -> str:
        setting = cap_setting(self.provider)
        return (f"budget: stopped before {self.what}: {cap_scope(self.provider)} has spent ${self.spent:.4f} of "
                f"${self.cap:.4f} ({setting}); {self.what}, estimated at ${self.estimate:.4f} ({self.basis}), would "
                f"pass it. Nothing more was spent. Raise {setting} and rerun with --set train.resume=true (what "
                f"was measured is reused), or measure less ({self.smaller})")


class SetupStopped(RuntimeError):
    def __init__(self, stop: SetupStop):
        super().__init__(stop.line())
        self.stop = stop


def setup_stop(caps: Mapping[Optional[str], float], spent: Mapping[str, float], estimate: Mapping[str, float],
               what: str) -> Optional[SetupStop]:
    """The setup rule in the module docstring over every cap in ``caps``; None: go on."""
    spent_by, estimated = with_total(add(spent)), with_total(add(estimate))
    for key in sorted(caps, key=lambda k: (k is not None, k or "")):
        have, upcoming = spent_by.get(key, 0.0), estimated.get(key, 0.0)
        if have >= caps[key] or have + HEADROOM * upcoming > caps[key]:
            return SetupStop(key, what, have, upcoming, caps[key])
    return None
