"""The numbered list of workers shown to the Conductor, and the mapping back to real workers.

During training the pool shown for a question may be a random subset renumbered 0..k-1, so the policy
learns from descriptions rather than memorising positions. A workflow's ``model_id`` values are shown
indices; ``worker_id(i)`` turns one back into the pool's real worker id.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from conductor.config import WorkerSpec


@dataclass(frozen=True)
class Roster:
    workers: tuple[WorkerSpec, ...]

    @classmethod
    def full(cls, workers: Sequence[WorkerSpec]) -> Roster:
        if not workers:
            raise ValueError("a roster needs at least one worker")
        return cls(tuple(workers))

    @classmethod
    def random_subset(cls, workers: Sequence[WorkerSpec], size: int, rng: random.Random) -> Roster:
        """``size`` distinct workers in random order, renumbered 0..size-1."""
        if not 1 <= size <= len(workers):
            raise ValueError(f"subset size {size} not in 1..{len(workers)}")
        return cls(tuple(rng.sample(list(workers), size)))

    def __len__(self) -> int:
        return len(self.workers)

    def worker_id(self, shown_index: int) -> str:
        return self.workers[shown_index].id

    @property
    def worker_ids(self) -> tuple[str, ...]:
        return tuple(w.id for w in self.workers)

    def listing(self, show_prices: bool = True) -> str:
        """``Model i: description`` lines, with prices where known and wanted; never brand ids."""
        lines = []
        for index, worker in enumerate(self.workers):
            line = f"Model {index}: {worker.description}"
            if show_prices and worker.price_in_per_m is not None and worker.price_out_per_m is not None:
                line += (f" (price: ${worker.price_in_per_m:g} per 1M input tokens, "
                         f"${worker.price_out_per_m:g} per 1M output tokens)")
            lines.append(line)
        return "\n".join(lines)
