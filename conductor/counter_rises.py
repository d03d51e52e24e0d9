"""What counters that only rise, but start again at zero when their holder restarts, rose by across readings.

The pool actors keep their counters (calls, $, cache hits) in memory; Ray restarts a dead actor with fresh
ones. So per source and counter, a reading at or above the last one rose by the difference, and a reading
from a restarted source rose by the reading itself (what the dead holder counted after the last reading is
lost; a restart is a fault, and that count cannot be recovered). A source that says which incarnation it is
(a pool actor's ``incarnation``, new at every start) is known to have restarted when that changes, even if
the new one has already counted past the old one's last reading; one that does not say, when a reading falls
below the last. The first reading of a source is its zero. Rises keep the counters' type (whole counts stay
ints). A source missing from a reading (an actor that did not answer) is simply not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Optional

Readings = Mapping[str, Mapping[str, float]]  # source -> counter -> value


class CounterRises:
    def __init__(self) -> None:
        self.last: dict[str, dict[str, float]] = {}
        self.total: dict[str, dict[str, float]] = {}  # since each source's first reading
        self.incarnation: dict[str, Optional[str]] = {}

    def read(self, readings: Readings, incarnations: Optional[Mapping[str, Optional[str]]] = None,
             ) -> dict[str, dict[str, float]]:
        """Take a reading; returns each read source's rises since its previous reading. ``incarnations``: which
        start of each source the reading is from, where the source says."""
        rises: dict[str, dict[str, float]] = {}
        for source, counters in readings.items():
            last = self.last.get(source)
            incarnation = (incarnations or {}).get(source)
            restarted = None not in (incarnation, self.incarnation.get(source)) \
                and incarnation != self.incarnation[source]
            self.incarnation[source] = incarnation
            rise = {name: (0 if last is None or name not in last else
                           value - last[name] if value >= last[name] and not restarted else value)
                    for name, value in counters.items()}
            total = self.total.setdefault(source, {})
            for name, amount in rise.items():
                total[name] = total.get(name, 0) + amount
            self.last[source] = dict(counters)
            rises[source] = rise
        return rises



def summed(rises: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Each counter added over the sources."""
    out: dict[str, float] = {}
    for counters in rises.values():
        for name, amount in counters.items():
            out[name] = out.get(name, 0) + amount
    return out
