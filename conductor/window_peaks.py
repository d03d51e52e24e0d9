"""How many of a log's arrival times any one rate window holds: what a provider's limiter counts, in its
two common forms (a sliding window, and fixed windows from an origin). The tests and bench/pool_rate.py read
the simulated provider's arrival log with these to check the client never sends more than its limit."""

from __future__ import annotations

import collections
import math
from collections.abc import Iterable


def window_peak(times: Iterable[float], window_s: float) -> int:
    """The most of ``times`` that any window [s, s + window_s) (or (s - window_s, s]) holds."""
    stamps, peak, start = sorted(times), 0, 0
    for end, t in enumerate(stamps):
        while t - stamps[start] >= window_s:
            start += 1
        peak = max(peak, end - start + 1)
    return peak


def fixed_window_peak(times: Iterable[float], window_s: float, origin: float = 0.0) -> int:
    """The most of ``times`` in one fixed window [origin + k * window_s, origin + (k + 1) * window_s)."""
    counts = collections.Counter(math.floor((t - origin) / window_s) for t in times)
    return max(counts.values(), default=0)
