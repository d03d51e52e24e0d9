"""What a two-call workflow can gain over the best single worker on a simulated orchestra, per domain.

For the fixed workflow "worker A solves, worker B checks A's answer" the simulator's rules
(conductor/simulator/oracle.py) give the expected accuracy on a set of items exactly, without a run:

    P(right on item i) = 1            if A solves i and B solves i
                         verify_keep  if A solves i and B does not
                         verify_fix   if A does not and B solves i
                         0            if neither does

averaged over the items of a domain (no sample seed: greedy evaluation). Among solve-then-check workflows a
trained Conductor can at best match the best such pair per domain (plan and aggregate shapes are not covered);
the gap to the best single worker is the headroom a per-domain "beats the best single worker" criterion has to
be read against, in units of the split's s.e.

    python -m conductor.simulator.headroom --config configs/train-paper7.yaml [--set evaluate.split=train]

``evaluate.split=unseen``: the preset's unseen task types (conductor/simulator/unseen.py).
"""

from __future__ import annotations

import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from conductor.config import Config, SimulatorConfig
from conductor.config_loader import config_from_cli
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import SimPreset, load_preset
from conductor.tasks.splits import configured_splits
from conductor.tasks.task import Task


@dataclass(frozen=True)
class DomainHeadroom:
    domain: str
    items: int
    singles: tuple[tuple[str, float], ...]           # (worker, accuracy), best first
    pairs: tuple[tuple[str, str, float], ...]         # (solver, checker, expected accuracy), best first

    @property
    def standard_error(self) -> float:
        """s.e. of the best single worker's accuracy on this many items."""
        p = self.singles[0][1]
        return math.sqrt(p * (1 - p) / self.items) if self.items else 0.0


def solve_then_check(oracle: Oracle, config: SimulatorConfig, solver: str, checker: str,
                     tasks: Sequence[Task]) -> float:
    """Expected accuracy of ``solver`` answering and ``checker`` verifying that answer (formula above)."""
    total = 0.0
    for task in tasks:
        a, b = oracle.base_correct[(solver, task.id)], oracle.base_correct[(checker, task.id)]
        total += (1.0 if b else config.verify_keep) if a else (config.verify_fix if b else 0.0)
    return total / len(tasks) if tasks else 0.0


def headroom(oracle: Oracle, config: SimulatorConfig, workers: Sequence[str],
             tasks: Sequence[Task]) -> list[DomainHeadroom]:
    result = []
    for domain in sorted({t.domain for t in tasks}):
        items = [t for t in tasks if t.domain == domain]
        singles = sorted(((w, sum(oracle.base_correct[(w, t.id)] for t in items) / len(items)) for w in workers),
                         key=lambda row: -row[1])
        pairs = sorted(((a, b, solve_then_check(oracle, config, a, b, items))
                        for a, b in itertools.product(workers, workers)), key=lambda row: -row[2])
        result.append(DomainHeadroom(domain, len(items), tuple(singles), tuple(pairs)))
    return result


def split_of(config: Config, preset: SimPreset) -> list[Task]:
    """The items ``evaluate.split`` names, cut exactly as training and evaluation cut them."""
    if config.evaluate.split == "unseen":
        if not preset.unseen:
            raise ValueError(f"the {preset.name} preset has no unseen task types")
        return list(preset.unseen)
    if config.evaluate.split == "all":
        return list(preset.tasks)
    splits = configured_splits(preset.tasks, config.train)
    return list(getattr(splits, config.evaluate.split))


def render(rows: Sequence[DomainHeadroom], top: int = 5) -> str:
    lines = ["| domain | items | best single | s.e. | best solve-then-check pairs (expected accuracy, gain) |",
             "|---|---|---|---|---|"]
    for row in rows:
        worker, best = row.singles[0]
        pairs = "; ".join(f"{a} > {b} {100 * p:.2f} ({100 * (p - best):+.2f})" for a, b, p in row.pairs[:top])
        lines.append(f"| {row.domain} | {row.items} | {worker} {100 * best:.2f} | {100 * row.standard_error:.2f} "
                     f"| {pairs} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    config = config_from_cli(argv, default_config="configs/train-paper7.yaml", description=__doc__)
    if config.pool.workers or config.data.datasets:
        print("headroom: the config names its own pool or datasets; the headroom is computed for a simulated "
              "preset's workers and tasks only", file=sys.stderr)
        return 2
    preset = load_preset(config.simulator)
    oracle = Oracle(preset, config.simulator)
    try:
        tasks = split_of(config, preset)
    except ValueError as exc:
        print(f"headroom: {exc}", file=sys.stderr)
        return 2
    print(f"{preset.name}, split {config.evaluate.split} ({len(tasks)} items)")
    print(render(headroom(oracle, config.simulator, [w.name for w in preset.workers], tasks)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
