"""A phase timer for a run's log: ``with Timer("train", timings): ...`` adds the elapsed seconds to
``timings["train"]`` (summing when a phase runs several times in one step)."""

from __future__ import annotations

import time
from typing import Optional


class Timer:
    def __init__(self, phase: str, timings: dict[str, float]):
        self.phase, self.timings = phase, timings
        self.started: Optional[float] = None

    def __enter__(self) -> Timer:
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        elapsed = time.perf_counter() - (self.started or time.perf_counter())
        self.timings[self.phase] = self.timings.get(self.phase, 0.0) + elapsed
