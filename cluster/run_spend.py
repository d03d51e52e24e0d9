"""The training driver's spend: reads the pool actors' cost counters in the snapshots cluster/pool_meters.py
takes at every step boundary and around every validation, keeps the run's ledger (``spend.json``), and gives
the step row its cost, the spend so far and the forecast (conductor/cost_forecast.py), the stop rule's
verdict (conductor/spend_cap.py) and summary.json's figures. Every cost between two step boundaries that no
validation took is the step's, so the steps, the validations, the baselines and the held-out evaluation add
up to what the pool spent."""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from conductor.config import Config
from conductor.cost_forecast import CostHistory, RunShape, forecast, heldout_estimate
from conductor.run_output import RunOutput
from conductor.spend_cap import BudgetStop, SetupStopped, budget_stop, setup_stop
from conductor.spend_meter import ByProvider, SpendMeter, add, read_ledger, read_unsettled, write_ledger

Snapshot = dict[str, dict[str, Any]]  # provider -> its pool actor's counters (RayPool.stats)


def minus(after: ByProvider, before: ByProvider) -> ByProvider:
    return {provider: usd - before.get(provider, 0.0) for provider, usd in after.items()}


class RunSpend:
    def __init__(self, config: Config, out: RunOutput):
        """A resumed run carries what its earlier segments spent; a fresh one starts at nothing."""
        self.config, self.out = config, out
        resume = config.train.resume
        self.meter = SpendMeter(read_ledger(out) if resume else {}, read_unsettled(out) if resume else {})
        self.mark: ByProvider = {}          # spent at the last step boundary
        self.validations: ByProvider = {}   # validation costs since then
        self.before_validation: ByProvider = {}
        # this segment's, in all, by phase
        self.segment = {"warm_start": 0.0, "baselines": 0.0, "training_steps": 0.0, "validations": 0.0}

    def check(self, estimate: ByProvider, what: str) -> None:
        """Before a measurement outside the loop (conductor/spend_cap.py's setup rule): stop if it would pass
        a cap."""
        stop = setup_stop(self.config.budget.caps(), self.meter.at_most(), estimate, what)
        if stop is not None:
            raise SetupStopped(stop)

    def add(self, spent: ByProvider, unsettled: Optional[ByProvider] = None, *, phase: str) -> None:
        """A spend outside the pool actors: an in-process pool's (the warm start's measured prior or menu,
        the held-out baselines), and its attempts whose bill is unknown at their worst case."""
        self.meter.add(spent, unsettled)
        self.segment[phase] += sum(spent.values())
        write_ledger(self.out, self.meter.spent(), self.meter.unsettled_total())

    def attach(self, snapshot: Snapshot, *, val_questions: int, heldout_questions: int) -> None:
        """From now on read the pool actors' counters; this ``snapshot`` is their zero."""
        train = self.config.train
        self.shape = RunShape(train.steps, train.eval_every, val_questions, heldout_questions,
                              train.questions_per_step * self.config.rollout.group_size, train.max_staleness)
        self.mark = self.read(snapshot)

    def read(self, snapshot: Snapshot) -> ByProvider:
        """Spent so far, by provider; an actor missing from ``snapshot`` (restarting) is read the next time."""
        spent = self.meter.read({provider: stats["cost_usd"] for provider, stats in snapshot.items()},
                                {provider: stats.get("incarnation") for provider, stats in snapshot.items()},
                                {provider: stats.get("unsettled_usd", 0.0) for provider, stats in snapshot.items()})
        write_ledger(self.out, spent, self.meter.unsettled_total())
        return spent

    def validation_started(self, snapshot: Snapshot) -> None:
        self.before_validation = self.read(snapshot)

    def validation_ended(self, snapshot: Snapshot) -> ByProvider:
        """The cost of the validation since ``validation_started``, by provider."""
        cost = minus(self.read(snapshot), self.before_validation)
        self.validations = add(self.validations, cost)
        self.segment["validations"] += sum(cost.values())
        return cost

    def step_row(self, state: Any, snapshot: Snapshot) -> dict[str, Any]:
        """The figures of the step just trained (``state.step``): its cost, the spend so far, the forecast."""
        now = self.read(snapshot)
        cost = minus(minus(now, self.mark), self.validations)
        self.mark, self.validations = now, {}
        self.segment["training_steps"] += sum(cost.values())
        row: dict[str, Any] = {"step_cost_usd": sum(cost.values()), "step_cost_by_provider": cost,
                               "spent_usd": sum(now.values())}
        expected = forecast(row["spent_usd"], CostHistory.of([*state.history, row], state.evals), state.step,
                            self.shape)
        return {**row, **(expected.row() if expected else {})}

    @staticmethod
    def validation_row(cost: ByProvider) -> dict[str, Any]:
        return {"val_cost_usd": sum(cost.values()), "val_cost_by_provider": cost}

    @property
    def capped(self) -> bool:
        return bool(self.config.budget.caps())

    def stop_before_next(self, state: Any) -> Optional[BudgetStop]:
        """The stop rule on the spend at the last reading (cluster/pool_meters.py takes one just before)."""
        caps = self.config.budget.caps()
        if not caps:
            return None
        return budget_stop(caps, self.meter.at_most(), CostHistory.of(state.history, state.evals), state.step,
                           self.shape)

    def check_heldout(self, snapshot: Snapshot, state: Any) -> None:
        """The setup rule before the closing held-out evaluation, estimated as the loop's reserve was: a run
        stopped by its cap reserved it, but a resumed segment whose cap is still spent would pay for it again."""
        self.read(snapshot)
        estimate = heldout_estimate(CostHistory.of(state.history, state.evals), self.shape)
        stop = setup_stop(self.config.budget.caps(), self.meter.at_most(), estimate, "the held-out evaluation")
        if stop is not None:
            raise SetupStopped(dataclasses.replace(stop, basis="from the measured steps and validations",
                                                   smaller="train.heldout_questions"))

    def summary(self, state: Any, stop: Optional[BudgetStop], snapshot: Snapshot) -> dict[str, Any]:
        """summary.json's spend figures: all segments', the caps, why it stopped, the forecast per step, and
        this segment's spend by phase (``closing``: the held-out evaluation and calls in flight when the loop
        ended)."""
        spent = self.read(snapshot)
        budget = self.config.budget
        segment = sum(spent.values()) - sum(self.meter.carried.values())
        phases = dict(self.segment, closing=segment - sum(self.segment.values()))
        return {"spent_usd": sum(spent.values()), "spent_usd_by_provider": dict(sorted(spent.items())),
                "unsettled_usd_max": sum(self.meter.unsettled_total().values()),
                "segment_spend_usd": phases,
                "budget_usd": budget.max_usd, "budget_usd_per_provider": dict(budget.max_usd_per_provider),
                "stopped": None, **(stop.summary() if stop else {}),
                "cost_forecasts": [{"step": row["step"], "low": row["forecast_low_usd"], "mid": row["forecast_usd"],
                                    "high": row["forecast_high_usd"]}
                                   for row in state.history if "forecast_usd" in row]}
