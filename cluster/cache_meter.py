"""The response cache's figures as the training driver reports them (conductor/response_cache.py), summed over
the cluster's pool actors from the snapshots cluster/pool_meters.py takes: per step (the calls since the
step before, validation included) into the step's log line and history, and for the run into
``summary.json``. Nothing when ``pool.cache`` is off. An actor that restarted counts again from zero and
one that did not answer is read the next time (conductor/counter_rises.py)."""

from __future__ import annotations

from typing import Any, Optional

from conductor.counter_rises import CounterRises, summed
from conductor.response_cache import COUNTS, cache_figures


class CacheMeter:
    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.rises = CounterRises()
        self.mode: Optional[str] = None

    def read(self, snapshot: dict[str, dict[str, Any]]) -> dict[str, float]:
        """What the cache counters rose by since the last reading, summed over the providers."""
        caches = {provider: stats["cache"] for provider, stats in snapshot.items() if "cache" in stats}
        for cache in caches.values():
            self.mode = cache["mode"]
        return summed(self.rises.read({provider: {key: cache[key] for key in COUNTS}
                                       for provider, cache in caches.items()},
                                      {provider: snapshot[provider].get("incarnation") for provider in caches}))

    def step(self, snapshot: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """``cache_hits``, ``cache_misses``, ``cache_identical`` and ``cache_hit_rate`` since the last reading."""
        if not self.enabled:
            return {}
        rise = self.read(snapshot)
        if not rise:
            return {}
        delta = {key: rise[key] for key in ("hits", "misses", "identical")}
        row = {f"cache_{key}": value for key, value in delta.items()}
        calls = delta["hits"] + delta["misses"]
        if calls:
            row["cache_hit_rate"] = delta["hits"] / calls
        return row

    def summary(self, snapshot: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """``summary.json``'s ``response_cache``: the run's hits, misses, hit rate, share of identical calls, what
        the hits would have cost (``saved_usd``) and what was not stored."""
        if not self.enabled:
            return {}
        self.read(snapshot)
        total = summed(self.rises.total)
        if not total:
            return {}
        return {"response_cache": cache_figures(total, self.mode)}
