"""The response cache's figures as the training driver reports them (conductor/response_cache.py), summed over
the cluster's pool actors: per step (the calls since the step before, validation included) into the step's
log line and history, and for the run into ``summary.json``. Nothing when ``pool.cache`` is off."""

from __future__ import annotations

from typing import Any, Optional

import ray

from conductor.response_cache import combined_stats


class CacheMeter:
    def __init__(self, pool: Any, enabled: bool):
        self.pool, self.enabled = pool, enabled
        self.last: dict[str, Any] = {"hits": 0, "misses": 0, "identical": 0}

    def totals(self) -> Optional[dict[str, Any]]:
        if not self.enabled:
            return None
        try:
            return combined_stats(list(self.pool.stats().values()))
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            return None  # a pool actor restarting: its counts start again, and this step shows none

    def step(self) -> dict[str, Any]:
        """``cache_hits``, ``cache_misses``, ``cache_identical`` and ``cache_hit_rate`` since the last call."""
        now = self.totals()
        if now is None:
            return {}
        delta = {key: max(0, now[key] - self.last[key]) for key in self.last}
        self.last = {key: now[key] for key in self.last}
        calls = delta["hits"] + delta["misses"]
        row = {f"cache_{key}": value for key, value in delta.items()}
        if calls:
            row["cache_hit_rate"] = delta["hits"] / calls
        return row

    def summary(self) -> dict[str, Any]:
        """``summary.json``'s ``response_cache``: the run's hits, misses, hit rate, share of identical calls, what
        the hits would have cost (``saved_usd``) and what was not stored."""
        totals = self.totals()
        return {} if totals is None else {"response_cache": totals}
