"""What a workflow can gain over the best single worker on a simulated orchestra, per domain.

**Pairs.** For "worker A solves, worker B checks A's answer" the simulator's rules
(conductor/simulator/oracle.py) give the expected accuracy on a set of items exactly, without a run:

    P(right on item i) = 1            if A solves i and B solves i
                         verify_keep  if A solves i and B does not
                         verify_fix   if A does not and B solves i
                         0            if neither does

averaged over the items of a domain (no sample seed: greedy evaluation, as a Conductor's workflows run).

**Any shape** (``--steps N``, up to 5): every workflow of up to N steps the simulator tells apart (solve,
check, solve with answers in view, reconcile, plan then solve, in any arrangement: conductor/simulator/
workflow_space.py states the shapes and the rules), with every assignment of workers, none pruned, scored
exactly in expectation over the checks' draws (conductor/simulator/workflow_scores.py). Per domain it prints
the most accurate workflow chosen on the train split (all GRPO sees) and on the split asked for (hindsight:
no policy can do better there in expectation), each with its accuracy on both, its gain over the split's
best single worker in units of that worker's s.e., how many workflows lie within one train s.e. of it (the
near-ties that make a policy's choice a coin toss), its worker tokens billed in one run through the oracle,
and that run's accuracy (one draw of every check). Every winner is checked item by item against the
oracle's own decision with its draws integrated, and the command fails if one item disagrees. ``--budget T``
keeps to workflows of at most T worker tokens a question (estimated per worker, conductor/simulator/
workflow_tokens.py); ``--written FILE:METHOD`` compares with the workflows an evaluation report's Conductor
wrote (its ``workflows`` section; the menu's shapes: one worker, or one that solves and one that checks),
by the paired s.e. of the per-item difference.

    python -m conductor.simulator.headroom --config configs/train-paper7.yaml [--set evaluate.split=heldout]
        [--steps 5 [--budget 2133] [--written docs/results/paper7.json:conductor]]

``evaluate.split=unseen``: the preset's unseen task types (conductor/simulator/unseen.py).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from conductor.config import Config, SimulatorConfig
from conductor.config_loader import config_from_cli
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import SimPreset, load_preset
from conductor.simulator.workflow_scores import Scored, item_types, oracle_expectation, per_item, search
from conductor.simulator.workflow_space import MAX_STEPS, Node, Shape, describe
from conductor.simulator.workflow_tokens import simulate, token_model
from conductor.tasks.splits import configured_splits
from conductor.tasks.task import Task

Written = list[tuple[Shape, tuple[str, ...], float]]  # (shape, workers, share of the domain's questions)


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


def binomial_se(p: float, items: int) -> float:
    return math.sqrt(p * (1 - p) / items) if items else 0.0


@dataclass(frozen=True)
class Winner:
    """The most accurate workflow of a domain chosen on one split, scored on the train and asked-for split."""
    domain: str
    chosen_on: str
    workflow: Scored
    near: dict[int, int]                # steps -> workflows within one s.e. of it on the split it was chosen on
    accuracy: dict[str, float]          # split -> expected accuracy
    gain_se: float                      # over the asked-for split's best single worker, in its s.e.
    tokens: float                       # worker tokens a question, billed in one run on the asked-for split
    realised: float                     # that run's accuracy
    items: np.ndarray = field(repr=False)  # P(right) per item of the asked-for split


def best_workflows(oracle: Oracle, config: SimulatorConfig, workers: Sequence[str], train: Sequence[Task],
                   tasks: Sequence[Task], split: str, max_steps: int, budget: float | None = None) -> list[Winner]:
    """Per domain of ``tasks``: the best workflow chosen on ``train`` (where it has the domain) and on ``tasks``."""
    result = []
    for domain in sorted({t.domain for t in tasks}):
        items = {split: [t for t in tasks if t.domain == domain]}
        if split != "train" and any(t.domain == domain for t in train):
            items = {"train": [t for t in train if t.domain == domain]} | items
        types = {name: item_types(oracle, workers, chosen) for name, chosen in items.items()}
        top = {name: max(t.can.mean(axis=0)) for name, t in types.items()}
        for chosen_on, chosen in types.items():
            cost = token_model(oracle, workers, items[chosen_on]).cost
            best, near = search(chosen, config, max_steps, binomial_se(top[chosen_on], chosen.items), cost, budget)
            accuracy = {name: float(per_item(t, config, best.shape, best.workers).mean()) for name, t in types.items()}
            probabilities = per_item(types[split], config, best.shape, best.workers)
            for task, p in zip(items[split], probabilities):
                if abs(oracle_expectation(oracle, best.shape, best.workers, task) - p) > 1e-9:
                    raise AssertionError(f"{task.id}: the rules give {p}, the oracle another chance, for "
                                         f"{describe(best.shape, best.workers)}")
            right, billed = simulate(oracle, best.shape, best.workers, items[split])
            realised, tokens = float(right.mean()), float(billed.mean())
            gain = (accuracy[split] - top[split]) / (binomial_se(top[split], types[split].items) or 1.0)
            result.append(Winner(domain, chosen_on, best, near, accuracy, gain, tokens, realised, probabilities))
    return result


def parse_written(text: str, workers: Sequence[str]) -> tuple[Shape, tuple[str, ...]]:
    """A report's ``worker(access) → worker(access)`` line, for the menu's shapes: one worker solves, or one
    solves and a second checks its answer (the ``verify`` shape)."""
    steps = [re.fullmatch(r"(.+)\((.*)\)", part.strip()) for part in text.split("→")]
    if any(m is None or m.group(1) not in workers for m in steps) or len(steps) > 2 or steps[0].group(2) != "[]":
        raise ValueError(f"not a menu workflow: {text!r}")
    if len(steps) == 2 and steps[1].group(2) not in ("all", "[0]", "0"):
        raise ValueError(f"not a menu workflow: {text!r}")
    shape = (Node("solve"),) if len(steps) == 1 else (Node("solve"), Node("check", (0,)))
    return shape, tuple(m.group(1) for m in steps)


def written_workflows(source: str, workers: Sequence[str]) -> dict[str, Written]:
    """``FILE:METHOD``: the workflows the method wrote per domain, with their shares of the questions."""
    path, _, method = source.rpartition(":")
    report = json.loads(Path(path).read_text())["workflows"][method]
    return {domain: [(*parse_written(text, workers), share) for text, share in row["top_workflows"].items()]
            for domain, row in report.items()}


def render_winners(winners: Sequence[Winner], split: str,
                   written: dict[str, tuple[str, np.ndarray]] | None = None) -> str:
    """The winners' table; with ``written`` (domain -> (its workflows, P(right) per item of the split)), how
    much each winner adds to them."""
    both = split != "train"  # a train column beside the split's
    head = (f"| domain | chosen on | workflow | steps | worker tokens |{' train |' if both else ''} {split} | "
            f"gain ({split} s.e.) | within one s.e. where chosen (<= 2 steps) |")
    lines = [head, "|---" * (9 if both else 8) + "|"]
    for w in winners:
        train = f" {100 * w.accuracy['train']:.2f} |" if both and "train" in w.accuracy else " - |" if both else ""
        lines.append(f"| {w.domain} | {w.chosen_on} | {describe(w.workflow.shape, w.workflow.workers)} | "
                     f"{w.workflow.steps} | {w.tokens:,.0f} |{train} {100 * w.accuracy[split]:.2f} (one run "
                     f"{100 * w.realised:.2f}) | {w.gain_se:+.2f} | {sum(w.near.values()):,} "
                     f"({w.near[1] + w.near.get(2, 0):,}) |")
    if written:
        lines += ["", f"| domain | written | {split} | chosen on train, minus written (paired s.e.) | "
                  f"chosen on {split}, minus written (paired s.e.) |", "|---|---|---|---|---|"]
        for domain, (names, mine) in sorted(written.items()):
            cells = []
            for w in (w for w in winners if w.domain == domain):
                diff = w.items - mine
                cells.append(f"{100 * diff.mean():+.2f} ({100 * diff.std(ddof=1) / math.sqrt(len(diff)):.2f})")
            lines.append(f"| {domain} | {names} | {100 * mine.mean():.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--steps", type=int, default=0, help=f"also search every workflow of up to this many "
                       f"steps (1-{MAX_STEPS})")
    extra.add_argument("--budget", type=float, default=None, help="worker tokens a question, at most")
    extra.add_argument("--written", default=None, metavar="FILE:METHOD",
                       help="compare with the workflows a report's Conductor wrote")
    flags, rest = extra.parse_known_args(argv)
    config = config_from_cli(rest, default_config="configs/train-paper7.yaml", description=__doc__)
    if not 0 <= flags.steps <= MAX_STEPS:
        print(f"headroom: --steps is 1 to {MAX_STEPS}", file=sys.stderr)
        return 2
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
    workers = [w.name for w in preset.workers]
    print(f"{preset.name}, split {config.evaluate.split} ({len(tasks)} items)")
    print(render(headroom(oracle, config.simulator, workers, tasks)))
    if flags.steps:
        split = config.evaluate.split
        train = list(configured_splits(preset.tasks, config.train).train) if split != "unseen" else []
        winners = best_workflows(oracle, config.simulator, workers, train, tasks, split, flags.steps, flags.budget)
        budget = f", at most {flags.budget:,.0f} worker tokens a question" if flags.budget is not None else ""
        print(f"\nThe most accurate workflow of up to {flags.steps} steps{budget}, per domain")
        written = None
        if flags.written:
            written = {}
            for domain, rows in written_workflows(flags.written, workers).items():
                types = item_types(oracle, workers, [t for t in tasks if t.domain == domain])
                names = "; ".join(f"{describe(shape, who)} {share:.0%}" for shape, who, share in rows)
                written[domain] = (names, sum(share * per_item(types, config.simulator, shape, who)
                                              for shape, who, share in rows))
        print(render_winners(winners, split, written))
    return 0


if __name__ == "__main__":
    sys.exit(main())
