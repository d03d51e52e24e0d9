"""What a training run has spent on worker and judge calls, by provider, across its segments.

The source is the pool's own counters (``ProviderClient.stats["cost_usd"]``, one per provider): every call
that reached a provider and was billed, whether its rollout was trained, dropped as stale or without reward
spread, validated or judged. ``SpendMeter`` turns readings of them into this segment's spend and adds what
earlier segments spent (``spend.json`` in the run's directory, rewritten at every step) and one-off spends
outside the pool actors (the held-out baselines' in-process pool).

Attempts sent whose bill is unknown (a timeout, a dropped connection, a call cancelled in flight) are in no
bill the client saw; the pool counts each at its worst case (``stats["unsettled_usd"]``: its prompt estimate
and whole reply limit at the worker's prices), and a cap is kept on ``at_most``: spent plus those.

A pool actor that restarts starts its counter again at zero (conductor/counter_rises.py): what the dead
actor spent after the last reading is not counted. The warm start's measured prior or menu (once per run
directory, reused) is a one-off spend added by the driver (``add``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Optional

from conductor.counter_rises import CounterRises
from conductor.run_output import RunOutput

ByProvider = dict[str, float]
LEDGER = "spend.json"


def add(*parts: Mapping[str, float]) -> ByProvider:
    """The sum of several by-provider amounts."""
    total: ByProvider = {}
    for part in parts:
        for provider, usd in part.items():
            total[provider] = total.get(provider, 0.0) + usd
    return total


class SpendMeter:
    def __init__(self, carried: Optional[Mapping[str, float]] = None,
                 carried_unsettled: Optional[Mapping[str, float]] = None):
        """``carried``: what earlier segments of the run spent (``read_ledger``); ``carried_unsettled``: their
        attempts whose bill is unknown, at their worst case (``read_unsettled``)."""
        self.carried = dict(carried or {})
        self.carried_unsettled = dict(carried_unsettled or {})
        self.rises = CounterRises()
        self.counted: ByProvider = {}   # what this segment's counters rose by, and the one-off spends
        self.unsettled: ByProvider = {}  # this segment's attempts whose bill is unknown, at their worst case

    def read(self, counters: Mapping[str, float], incarnations: Optional[Mapping[str, Optional[str]]] = None,
             unsettled: Optional[Mapping[str, float]] = None) -> ByProvider:
        """Take a reading of the providers' cost counters (and ``unsettled``, their unknown bills' counters);
        the first reading of a provider is its zero. ``incarnations``: which start of its pool actor each
        counter is from (conductor/counter_rises.py)."""
        readings = {provider: {"usd": usd, "unsettled": (unsettled or {}).get(provider, 0.0)}
                    for provider, usd in counters.items()}
        rises = self.rises.read(readings, incarnations)
        self.counted = add(self.counted, {provider: rise["usd"] for provider, rise in rises.items()})
        self.unsettled = add(self.unsettled, {provider: rise["unsettled"] for provider, rise in rises.items()})
        return self.spent()

    def add(self, spent: Mapping[str, float], unsettled: Optional[Mapping[str, float]] = None) -> None:
        """A spend made outside the counters read here (and its unknown bills at their worst case)."""
        self.counted = add(self.counted, spent)
        self.unsettled = add(self.unsettled, unsettled or {})

    def spent(self) -> ByProvider:
        return add(self.carried, self.counted)

    def unsettled_total(self) -> ByProvider:
        """Every segment's attempts whose bill is unknown, at their worst case."""
        return add(self.carried_unsettled, self.unsettled)

    def at_most(self) -> ByProvider:
        """What the run can have been billed: spent, and its unknown bills at their worst case (a cap's)."""
        return add(self.spent(), self.unsettled_total())

    @property
    def total(self) -> float:
        return sum(self.spent().values())


def read_ledger(out: RunOutput) -> ByProvider:
    """What the run's earlier segments spent (nothing for a fresh run directory)."""
    if not out.exists(LEDGER):
        return {}
    return {provider: float(usd) for provider, usd in json.loads(out.read_text(LEDGER))["by_provider"].items()}


def read_unsettled(out: RunOutput) -> ByProvider:
    """The earlier segments' attempts whose bill is unknown, at their worst case (none in older ledgers)."""
    if not out.exists(LEDGER):
        return {}
    by_provider = json.loads(out.read_text(LEDGER)).get("unsettled_usd_by_provider") or {}
    return {provider: float(usd) for provider, usd in by_provider.items()}


def write_ledger(out: RunOutput, spent: Mapping[str, float], unsettled: Optional[Mapping[str, float]] = None) -> None:
    ledger = {"spent_usd": sum(spent.values()), "by_provider": dict(sorted(spent.items())),
              "unsettled_usd_by_provider": dict(sorted((unsettled or {}).items()))}
    out.write_text(LEDGER, text=json.dumps(ledger, indent=2))
