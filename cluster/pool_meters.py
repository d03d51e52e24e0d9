"""The training driver's readings of its pool actors: one snapshot of every actor's counters
(``RayPool.stats``) at each boundary — a step's end, a validation's start and end, the loop's end, the run's
end — shared by the three meters that read them: the spend and its forecast (cluster/run_spend.py), the
response cache's figures (cluster/cache_meter.py) and how close training ran to the provider's limits
(conductor/pool_utilisation.py, over training spans only).

One rule for a pool actor that is dead or restarting: it is missing from that snapshot (it is not waited
on), and each meter reads it again at the next one; counters that went back to zero count from there."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any, Optional

from cluster.cache_meter import CacheMeter
from cluster.run_spend import RunSpend, Snapshot
from conductor.pool_utilisation import PoolMeter
from conductor.spend_cap import BudgetStop
from conductor.spend_meter import ByProvider

log = logging.getLogger(__name__)
READ_TIMEOUT_S = 30.0


class PoolMeters:
    def __init__(self, pool: Any, spend: RunSpend, *, caching: bool, val_questions: int, heldout_questions: int):
        """``pool``: the run's RayPool; ``spend`` already holds what was spent outside it (the baselines)."""
        self.pool, self.spend = pool, spend
        self.cache = CacheMeter(enabled=caching)
        self.usage = PoolMeter()  # training's share of the pool's work
        self.latest: Snapshot = {}
        first = self.read()
        self.spend.attach(first, val_questions=val_questions, heldout_questions=heldout_questions)
        self.cache.read(first)

    def read(self) -> Snapshot:
        self.latest = self.pool.stats(allow_unavailable=True, timeout_s=READ_TIMEOUT_S)
        return self.latest

    def resume_training(self) -> None:
        """Training's span starts at the last reading (setup's, or the validation's before the first step)."""
        self.usage.resume(self.latest)

    def pause_training(self) -> None:
        if self.usage.running:
            self.usage.pause(self.read())

    def step_row(self, state: Any) -> dict[str, Any]:
        """The step log's pool figures: the cache's since the last step, the step's cost, spend and forecast."""
        snapshot = self.read()
        return self.cache.step(snapshot) | self.spend.step_row(state, snapshot)

    @contextlib.contextmanager
    def validation(self) -> Iterator[ByProvider]:
        """Around a validation: training's span pauses, and the yielded dict holds the validation's cost, by
        provider, once the block ends. Training's span runs again after it."""
        cost: ByProvider = {}
        before = self.read()
        self.usage.pause(before)
        self.spend.validation_started(before)
        yield cost
        after = self.read()
        cost.update(self.spend.validation_ended(after))
        self.usage.resume(after)

    def record_spend(self) -> None:
        """The ledger (``spend.json``) from a fresh reading: what was spent since the last step or validation
        counts even in a run that ends without a summary (a signal's stop)."""
        self.spend.read(self.read())

    def record_spend_on_exit(self) -> None:
        """``record_spend`` as the run ends, however it ends (a signal during the held-out evaluation, an actor
        that did not come back): a call still in flight is not counted (at most the pool's concurrency), and a
        failure is logged, not raised over the run's own error."""
        try:
            self.record_spend()
        except Exception as exc:
            log.warning("the pool's spend could not be read as the run ended (%s): spend.json holds it as of the "
                        "last reading", type(exc).__name__)

    def stop_before_next(self, state: Any) -> Optional[BudgetStop]:
        """The stop rule on a fresh reading: what was paid since the last one (a step dropped when the learner
        group was rebuilt, rollouts admitted for the next step) counts before the next step is let through."""
        if not self.spend.capped:
            return None
        self.spend.read(self.read())
        return self.spend.stop_before_next(state)

    def check_heldout(self, state: Any) -> None:
        """Before the closing held-out evaluation, on a fresh reading: raise SetupStopped if it would pass a cap."""
        if self.spend.capped:
            self.spend.check_heldout(self.read(), state)

    def summary(self, state: Any, stop: Optional[BudgetStop]) -> dict[str, Any]:
        """summary.json's ``training_pool``, ``response_cache`` (when on) and spend figures."""
        self.pause_training()
        snapshot = self.read()
        return {"training_pool": self.usage.report(), **self.cache.summary(snapshot),
                **self.spend.summary(state, stop, snapshot)}
