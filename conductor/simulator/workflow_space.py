"""Every workflow of up to five steps the simulated orchestra tells apart, and the exact chance that each
answers an item right, from the simulator's rules (conductor/simulator/oracle.py).

**What a step reads.** The oracle decides a step's answer from the worker's role (conductor/simulator/
roles.py reads it from the subtask's words and the number of answers in view), whether the worker can solve
the item, and the earlier steps it sees; nothing else of the conversation matters but one uniform draw, a
hash of the messages. So a *shape* names, per step, a role and exactly the earlier steps the role reads:

- ``solve``: answers alone (nothing in view): its own answer, no draw;
- ``plan``: a key idea and no answer, right if the planner can solve; it reads nothing (what it sees is
  ignored), and only a ``plan_solve`` reads it;
- ``plan_solve``: solves with a plan and no answer in view (with several plans, the latest counts);
- ``check``: verifies one earlier answer (the latest in view; the others are ignored, so checks that each see
  every earlier step are a chain of checks);
- ``see_solve``: solves with one or more earlier answers in view (boost / mislead);
- ``reconcile``: aggregates two or more earlier answers (most common one, ties to the latest in view).

The last step's answer is the workflow's. A step no later step reads, other than the last, changes nothing
but the bill, so shapes keep only steps the answer descends from. Relabelling steps that keeps every step's
inputs earlier and every reconciler's inputs in their order is the same workflow, and is enumerated once.
With these rules there are 1, 3, 12, 121 and 2,709 shapes of 1-5 steps; every one is scored with every
assignment of workers (7^n for n steps), none pruned.

**The rules, per step** (``c`` the simulator config; "can" = the worker solves the item alone, greedy: no
sample seed, as evaluation calls workers; W = the worker's own wrong answer, one per worker and item):

- solve: gold if can, else W;
- plan_solve: right plan: gold if can, else gold with ``c.plan_follow``, else W; wrong plan: W with
  ``c.plan_mislead`` if can, else gold; W if cannot;
- check (of answer x): x right: gold if can, else gold with ``c.verify_keep``, else W; x wrong: gold with
  ``c.verify_fix`` if can, else x unchanged;
- see_solve: some answer in view right: gold if can, else gold with ``c.boost``, else W; none right: W
  with ``c.mislead`` if can, else gold; W if cannot;
- reconcile: can: gold with ``c.aggregate_pick``, else the most common answer in view; cannot: the most
  common with ``c.aggregate_follow``, else W.

Each step's draw is a hash of its messages, so steps draw independently (a policy gets this by wording two
otherwise identical steps differently; with the same words, worker and view two steps would share a draw).
The expected accuracy is then exact: every step has two branches (draw below or above the one probability
its case uses), and a workflow's chance on an item is the sum over the 2^n branch paths. It depends on the
item only through each step's worker's "can" bit and which workers' wrong answers coincide (the most common
answer counts equal answers), its *type*; ``success`` gives it for every type at once.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from conductor.config import SimulatorConfig

ROLES = ("solve", "plan", "plan_solve", "check", "see_solve", "reconcile")
MAX_STEPS = 5


@dataclass(frozen=True)
class Node:
    """One step: its role and the earlier steps it reads (in step order)."""
    role: str
    inputs: tuple[int, ...] = ()


Shape = tuple[Node, ...]


def _subsets(items: Sequence[int], smallest: int) -> Iterator[tuple[int, ...]]:
    for size in range(smallest, len(items) + 1):
        yield from itertools.combinations(items, size)


def _options(steps: Shape) -> list[Node]:
    answers = [i for i, node in enumerate(steps) if node.role != "plan"]
    plans = [i for i, node in enumerate(steps) if node.role == "plan"]
    return ([Node("solve"), Node("plan")] + [Node("plan_solve", (p,)) for p in plans]
            + [Node("check", (j,)) for j in answers] + [Node("see_solve", s) for s in _subsets(answers, 1)]
            + [Node("reconcile", s) for s in _subsets(answers, 2)])


def _all_read(shape: Shape) -> bool:
    """Does the last step's answer descend from every step?"""
    reached, stack = {len(shape) - 1}, [len(shape) - 1]
    while stack:
        for j in shape[stack.pop()].inputs:
            if j not in reached:
                reached.add(j)
                stack.append(j)
    return len(reached) == len(shape)


def _relabelled(shape: Shape, new_index: Sequence[int]) -> Shape | None:
    """``shape`` with step i moved to ``new_index[i]``; None where that breaks step order or a reconciler's
    input order (its ties go to the latest answer, so that order is part of the workflow)."""
    nodes: list[Node | None] = [None] * len(shape)
    for old, node in enumerate(shape):
        inputs = tuple(new_index[j] for j in node.inputs)
        if any(j >= new_index[old] for j in inputs):
            return None
        if node.role == "reconcile" and list(inputs) != sorted(inputs):
            return None
        nodes[new_index[old]] = Node(node.role, tuple(sorted(inputs)))
    return tuple(nodes)  # type: ignore[arg-type]


def _key(shape: Shape) -> tuple:
    return tuple((ROLES.index(node.role), node.inputs) for node in shape)


def canonical(shape: Shape) -> Shape:
    """The least-keyed of the step orders that make the same workflow (the last step stays last)."""
    last = len(shape) - 1
    orders = (_relabelled(shape, list(order) + [last]) for order in itertools.permutations(range(last)))
    return min((other for other in orders if other is not None), key=_key)


def is_canonical(shape: Shape) -> bool:
    return canonical(shape) == shape


def arrangements(steps: int) -> Iterator[Shape]:
    """Every shape of exactly ``steps`` steps whose answer reads every step, in every step order."""
    def grow(prefix: Shape) -> Iterator[Shape]:
        if len(prefix) == steps:
            if prefix[-1].role != "plan" and _all_read(prefix):
                yield prefix
            return
        for node in _options(prefix):
            yield from grow(prefix + (node,))

    return grow(())


@cache
def shapes(steps: int) -> tuple[Shape, ...]:
    """Every shape of exactly ``steps`` steps, once each (in its canonical step order)."""
    return tuple(shape for shape in arrangements(steps) if is_canonical(shape))


@cache
def partitions(n: int) -> tuple[tuple[int, ...], ...]:
    """The ways n steps' wrong answers can coincide, as restricted growth strings (block of each step)."""
    found = []

    def grow(prefix: tuple[int, ...]) -> None:
        if len(prefix) == n:
            found.append(prefix)
            return
        for block in range(max(prefix, default=-1) + 2):
            grow(prefix + (block,))

    grow(())
    return tuple(found)


def type_count(n: int) -> int:
    return 2 ** n * len(partitions(n))


def type_table(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(can, block) of every type of an n-step workflow: type = can bits (step i's bit i) + 2^n * partition."""
    bits = np.arange(2 ** n)
    can = ((bits[:, None] >> np.arange(n)) & 1).astype(bool)
    blocks = np.array(partitions(n), dtype=np.int64).reshape(-1, n)
    return np.tile(can, (len(blocks), 1)), np.repeat(blocks, 2 ** n, axis=0)


def success(shape: Shape, c: SimulatorConfig) -> np.ndarray:
    """P(the last step's answer is right) for every type (``type_table``), by the rules above."""
    n = len(shape)
    can_t, block_t = type_table(n)
    low_p = ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1).astype(bool)  # path: draw below, per step
    size = (len(can_t), len(low_p))
    prob = np.ones(size)
    value: list[np.ndarray] = []  # per step: 0 gold, 1 + b the wrong answer of block b; a plan: 0 right, 1 not
    for i, node in enumerate(shape):
        can = np.broadcast_to(can_t[:, i][:, None], size)
        low = np.broadcast_to(low_p[:, i][None, :], size)
        mine = np.where(can, 0, 1 + block_t[:, i][:, None])  # gold if it can solve, else its own wrong answer
        wrong = np.broadcast_to(1 + block_t[:, i][:, None], size)
        if node.role == "solve":
            t, below, above = np.ones(size), mine, mine
        elif node.role == "plan":
            t = np.ones(size)
            below = above = np.where(can, 0, 1)
        elif node.role == "reconcile":
            seen = np.stack([value[j] for j in node.inputs])
            counts = (seen[:, None] == seen[None, :]).sum(axis=1)
            latest = np.argmax(counts * len(node.inputs) + np.arange(len(node.inputs))[:, None, None], axis=0)
            common = np.take_along_axis(seen, latest[None], axis=0)[0]
            t = np.where(can, c.aggregate_pick, c.aggregate_follow)
            below, above = np.where(can, 0, common), np.where(can, common, wrong)
        elif node.role == "check":
            checked = value[node.inputs[0]]
            right = checked == 0
            t = np.where(right, np.where(can, 1.0, c.verify_keep), np.where(can, c.verify_fix, 1.0))
            below = np.where(right, 0, np.where(can, 0, checked))
            above = np.where(right, mine, checked)
        else:  # see_solve, plan_solve
            if node.role == "see_solve":
                good, boost, mislead = np.any([value[j] == 0 for j in node.inputs], axis=0), c.boost, c.mislead
            else:
                good, boost, mislead = value[node.inputs[0]] == 0, c.plan_follow, c.plan_mislead
            t = np.where(good, np.where(can, 1.0, boost), np.where(can, mislead, 1.0))
            below, above = np.where(good, 0, np.where(can, wrong, mine)), mine
        prob = prob * np.where(low, t, 1.0 - t)
        value.append(np.where(low, below, above))
    return (prob * (value[-1] == 0)).sum(axis=1)


def describe(shape: Shape, workers: Sequence[str]) -> str:
    """One line: each step's worker, role and the steps it reads, e.g. ``gpt-5 solve; claude check(0)``."""
    parts = []
    for node, worker in zip(shape, workers):
        reads = f"({','.join(map(str, node.inputs))})" if node.inputs else ""
        parts.append(f"{worker} {node.role}{reads}")
    return "; ".join(parts)
