"""How close a provider runs to its limits, from the pool's own counters: requests per second against the
configured rpm, tokens against tpm, and the share of time the pool was busy.

A pool client keeps two ``BusyClock``s per provider: *sending* (at least one request out at the provider)
and *waiting* (at least one call queued for a slot or the rate budget). Waiting close to 1 over a span says
demand exceeded the limit all along: the provider, not the caller, set the pace. ``PoolMeter`` sums the
counters over chosen spans only (training, not the validations between its steps), from snapshots taken
on the pool's own clock:

    requests/s ÷ (rpm / W)        tokens per W ÷ tpm        busy = sending_s / span     W = rate_window_s

The request ratio's ceiling is W / (W + m) (conductor/rate_limits.py: the client keeps L per W + m).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any, Optional

COUNTERS = ("attempts", "calls", "rate_limited", "prompt_tokens", "completion_tokens", "sending_s", "waiting_s")


class BusyClock:
    """Seconds during which at least one holder was inside (overlapping holders count once)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self.holders = 0
        self.since = 0.0
        self.total = 0.0

    def enter(self) -> None:
        if self.holders == 0:
            self.since = self.clock()
        self.holders += 1

    def leave(self) -> None:
        self.holders -= 1
        if self.holders == 0:
            self.total += self.clock() - self.since

    def seconds(self, now: Optional[float] = None) -> float:
        """Up to ``now`` (default: the clock's now): pass the time a snapshot is stamped with."""
        now = self.clock() if now is None else now
        return self.total + (now - self.since if self.holders else 0.0)

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        self.enter()
        try:
            yield
        finally:
            self.leave()


def utilisation(totals: dict[str, float], rpm: Optional[float], tpm: Optional[float],
                window_s: float) -> dict[str, Optional[float]]:
    """Rates and ratios of one provider's ``totals`` over ``totals["seconds"]`` (None where a limit is unset)."""
    seconds = totals["seconds"]
    if seconds <= 0:
        raise ValueError("utilisation needs a span of more than 0 seconds")
    requests_per_s = totals["attempts"] / seconds
    tokens_per_window = (totals["prompt_tokens"] + totals["completion_tokens"]) / seconds * window_s
    return {"requests_per_s": requests_per_s, "tokens_per_window": tokens_per_window,
            "rpm_ratio": requests_per_s / (rpm / window_s) if rpm else None,
            "tpm_ratio": tokens_per_window / tpm if tpm else None,
            "busy": totals["sending_s"] / seconds, "waiting": totals["waiting_s"] / seconds}


class PoolMeter:
    """Sums each provider's counters over the spans between ``resume`` and ``pause``, each given a snapshot:
    {provider: counters}, each with ``clock_s`` (the pool's clock), the ``COUNTERS``, and its configured
    limits ``configured_rpm``, ``tpm``, ``rate_window_s``."""

    def __init__(self) -> None:
        self.started: Optional[dict[str, dict[str, Any]]] = None
        self.totals: dict[str, dict[str, float]] = {}
        self.limits: dict[str, dict[str, Any]] = {}
        self.lost_spans = 0

    @property
    def running(self) -> bool:
        return self.started is not None

    def resume(self, snapshot: dict[str, dict[str, Any]]) -> None:
        if self.started is None:
            self.started = snapshot

    def pause(self, snapshot: dict[str, dict[str, Any]]) -> None:
        if self.started is None:
            return
        now, started, self.started = snapshot, self.started, None
        for provider in {**started, **now}:
            before, after = started.get(provider), now.get(provider)
            if before is None or after is None or after.get("incarnation") != before.get("incarnation") \
                    or any(after[key] < before[key] for key in ("clock_s", *COUNTERS)):
                self.lost_spans += 1  # unread at one end, or its counters restarted with the pool actor
                continue
            total = self.totals.setdefault(provider, dict.fromkeys(("seconds", *COUNTERS), 0.0))
            total["seconds"] += after["clock_s"] - before["clock_s"]
            for key in COUNTERS:
                total[key] += after[key] - before[key]
            self.limits[provider] = {"rpm": after["configured_rpm"], "tpm": after["tpm"],
                                     "rate_window_s": after["rate_window_s"]}

    def report(self) -> dict[str, dict[str, Any]]:
        """Per provider: the summed counters, its limits, and the rates and ratios over the (paused) spans."""
        return {provider: {**total, **self.limits[provider],
                           **(utilisation(total, self.limits[provider]["rpm"], self.limits[provider]["tpm"],
                                          self.limits[provider]["rate_window_s"]) if total["seconds"] > 0 else {})}
                for provider, total in self.totals.items()}
