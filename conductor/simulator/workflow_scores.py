"""Scoring every workflow of up to five steps on a set of items at once, and checking a workflow against the
simulator itself.

``search`` scores each shape of conductor/simulator/workflow_space.py with every assignment of workers: an
item's chance depends only on its *type* for that assignment (each step's worker's "can" bit, and which of
their wrong answers coincide), so a domain's expected accuracy for all 7^n assignments of an n-step shape is
one product, (assignments x types counts) @ (types x shapes success). No assignment is pruned.

``oracle_expectation`` needs no such reasoning: it walks a workflow through the oracle's own decision
(``Oracle._decide``, the code the simulated server runs), rendering and re-reading every answer as a later
step would, and integrates each step's draw exactly (the decision is constant between the config's
probabilities). conductor/simulator/headroom.py checks every workflow it reports with it, item by item.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from conductor.config import SimulatorConfig
from conductor.simulator.oracle import Oracle, Seen
from conductor.simulator.render import key_idea, own_value, plan_is_right, render_answer, render_plan, uniform
from conductor.simulator.roles import Role
from conductor.simulator.workflow_space import Shape, partitions, shapes, success, type_count, type_table
from conductor.tasks.task import Task
from conductor.verifiers.answer_key import answer_key, final_value, is_right

Cost = Callable[[Shape, np.ndarray], np.ndarray]  # (shape, assignments) -> worker tokens a question of each

ROLE_OF = {"solve": Role.SOLVE, "plan": Role.PLAN, "plan_solve": Role.SOLVE, "check": Role.VERIFY,
           "see_solve": Role.SOLVE, "reconcile": Role.AGGREGATE}


@dataclass(frozen=True)
class ItemTypes:
    """Per item of a set: which workers solve it alone, and which of their wrong answers are the same."""
    workers: tuple[str, ...]
    can: np.ndarray    # (items, workers) bool
    wrong: np.ndarray  # (items, workers) int; equal numbers: the same wrong answer (answer_key)

    @property
    def items(self) -> int:
        return len(self.can)


def _stated(task: Task, value: str, oracle: Oracle, worker: str, role: str, style: float) -> str:
    """``value`` as a later step reads it back from the rendered reply."""
    return final_value(task, render_answer(task, value, oracle.workers[worker], role, style)) or ""


def item_types(oracle: Oracle, workers: Sequence[str], tasks: Sequence[Task]) -> ItemTypes:
    can = np.array([[oracle.base_correct[(w, t.id)] for w in workers] for t in tasks], dtype=bool)
    can = can.reshape(-1, len(workers))
    wrong = np.zeros(can.shape, dtype=np.int64)
    for x, task in enumerate(tasks):
        style, keys = uniform(oracle.seed, "style", task.id), {}
        for k, worker in enumerate(workers):
            value = _stated(task, own_value(task, False, uniform(oracle.seed, "wrong", worker, task.id)), oracle,
                            worker, "solve", style)
            if is_right(task, value):
                raise ValueError(f"{worker}'s wrong answer to {task.id} is right: the types assume it never is")
            wrong[x, k] = keys.setdefault(answer_key(task, value), len(keys))
    return ItemTypes(tuple(workers), can, wrong)


def assignments(workers: int, n: int) -> np.ndarray:
    """Every (step 0's worker, ..., step n-1's), in ``itertools.product`` order."""
    return np.array(list(itertools.product(range(workers), repeat=n)), dtype=np.int64).reshape(-1, n)


def type_counts(items: ItemTypes, n: int, plan: np.ndarray | None = None, chunk: int = 64) -> np.ndarray:
    """(assignments, types) item counts for n-step workflows (``workflow_space.type_table``'s type order), for
    every assignment or the rows of ``plan`` (worker indices)."""
    plan = assignments(len(items.workers), n) if plan is None else plan
    code = np.full(n ** n, -1, dtype=np.int64)  # restricted growth string, base n, -> its partition's index
    for index, rgs in enumerate(partitions(n)):
        code[sum(b * n ** i for i, b in enumerate(rgs))] = index
    counts = np.zeros(len(plan) * type_count(n), dtype=np.float32)
    rows = np.arange(len(plan))[None, :] * type_count(n)
    for start in range(0, items.items, chunk):
        can, keys = items.can[start:start + chunk][:, plan], items.wrong[start:start + chunk][:, plan]
        bits = (can * (1 << np.arange(n))).sum(axis=-1)
        label, fresh = np.zeros(keys.shape, dtype=np.int64), np.ones(keys.shape[:2], dtype=np.int64)
        for i in range(1, n):
            same = keys[..., :i] == keys[..., i:i + 1]
            seen = same.any(axis=-1)
            first = np.take_along_axis(label[..., :i], np.argmax(same, axis=-1)[..., None], axis=-1)[..., 0]
            label[..., i] = np.where(seen, first, fresh)
            fresh += ~seen
        part = code[(label * n ** np.arange(n)).sum(axis=-1)]
        counts += np.bincount((rows + bits + 2 ** n * part).ravel(), minlength=len(counts)).astype(np.float32)
    return counts.reshape(len(plan), type_count(n))


@dataclass(frozen=True)
class Scored:
    shape: Shape
    workers: tuple[str, ...]
    accuracy: float

    @property
    def steps(self) -> int:
        return len(self.shape)


_RULES = ("boost", "mislead", "verify_keep", "verify_fix", "aggregate_pick", "aggregate_follow", "plan_follow",
          "plan_mislead")
_TABLES: dict[tuple, np.ndarray] = {}


def success_table(n: int, c: SimulatorConfig) -> np.ndarray:
    """(types, shapes) success of every n-step shape (kept: the same for every domain and split)."""
    key = (n,) + tuple(getattr(c, name) for name in _RULES)
    if key not in _TABLES:
        _TABLES[key] = np.stack([success(shape, c) for shape in shapes(n)], axis=1).astype(np.float32)
    return _TABLES[key]


def scores(items: ItemTypes, c: SimulatorConfig, max_steps: int, chunk: int = 256
           ) -> Iterator[tuple[int, tuple[Shape, ...], np.ndarray]]:
    """(steps, shapes, (assignments x shapes) expected accuracy) for every shape, in chunks."""
    for n in range(1, max_steps + 1):
        counts = type_counts(items, n) / max(items.items, 1)
        table, every = success_table(n, c), shapes(n)
        for start in range(0, len(every), chunk):
            yield n, every[start:start + chunk], counts @ table[:, start:start + chunk]


def search(items: ItemTypes, c: SimulatorConfig, max_steps: int, margin: float, cost: Cost | None = None,
           budget: float | None = None) -> tuple[Scored, dict[int, int]]:
    """The most accurate workflow (the fewest steps among equals), and per step count how many workflows lie
    within ``margin`` of it (it included); with ``budget``, among the workflows ``cost`` puts within it."""
    best: Scored | None = None
    near: list[tuple[int, np.ndarray]] = []
    for n, block, accuracy in scores(items, c, max_steps):
        plan = assignments(len(items.workers), n)
        if budget is not None and cost is not None:
            over = np.stack([cost(shape, plan) for shape in block], axis=1) > budget
            accuracy = np.where(over, -1.0, accuracy)
        row, col = np.unravel_index(np.argmax(accuracy), accuracy.shape)
        if accuracy[row, col] >= 0 and (best is None or accuracy[row, col] > best.accuracy + 1e-6):
            best = Scored(block[col], tuple(items.workers[k] for k in plan[row]), float(accuracy[row, col]))
        if best is not None:
            near.append((n, accuracy[accuracy >= best.accuracy - margin - 1e-6]))
    if best is None:
        raise ValueError(f"no workflow within {budget} worker tokens")
    counts = {n: 0 for n in range(1, max_steps + 1)}
    for n, values in near:
        counts[n] += int((values >= best.accuracy - margin - 1e-6).sum())
    return best, counts


def per_item(items: ItemTypes, c: SimulatorConfig, shape: Shape, workers: Sequence[str]) -> np.ndarray:
    """Each item's P(right) for one workflow: ``success`` at the item's type."""
    n, index = len(shape), [items.workers.index(w) for w in workers]
    can, block = type_table(n)
    lookup = {(tuple(k), tuple(b)): t for t, (k, b) in enumerate(zip(can.tolist(), block.tolist()))}
    table = success(shape, c)
    result = np.zeros(items.items)
    for x in range(items.items):
        labels: dict[int, int] = {}
        rgs = tuple(labels.setdefault(int(items.wrong[x, k]), len(labels)) for k in index)
        result[x] = table[lookup[(tuple(bool(items.can[x, k]) for k in index), rgs)]]
    return result


def expected(items: ItemTypes, c: SimulatorConfig, shape: Shape, workers: Sequence[str]) -> float:
    """One workflow's expected accuracy on ``items``, by the same product as ``search``."""
    plan = np.array([[items.workers.index(w) for w in workers]], dtype=np.int64)
    return float(type_counts(items, len(shape), plan)[0] @ success(shape, c)) / max(items.items, 1)


def _midpoints(c: SimulatorConfig) -> list[tuple[float, float]]:
    """(draw, weight): one draw inside each interval between the config's probabilities."""
    cuts = sorted({0.0, 1.0} | {p for p in (c.boost, c.mislead, c.verify_keep, c.verify_fix, c.aggregate_pick,
                                           c.aggregate_follow, c.plan_follow, c.plan_mislead) if 0 < p < 1})
    return [((a + b) / 2, b - a) for a, b in zip(cuts, cuts[1:])]


def oracle_expectation(oracle: Oracle, shape: Shape, workers: Sequence[str], task: Task) -> float:
    """P(right) of one workflow on one item, from ``Oracle._decide`` with each step's draw integrated."""
    style = uniform(oracle.seed, "style", task.id)
    states: dict[tuple, float] = {(): 1.0}  # per step: ("answer", value) or ("plan", right)
    stated: dict[tuple, str] = {}
    for node, worker in zip(shape, workers):
        own = oracle.can_solve(worker, task, None)
        following: dict[tuple, float] = defaultdict(float)
        for state, p in states.items():
            seen = [Seen(state[j][1], answer_key(task, state[j][1]), is_right(task, state[j][1]))
                    for j in node.inputs if state[j][0] == "answer"]
            plans = [state[j][1] for j in node.inputs if state[j][0] == "plan"]
            role = ROLE_OF[node.role]
            if role is Role.PLAN:
                text = render_plan(task, key_idea(oracle.seed, task, own, worker), oracle.workers[worker], style)
                following[state + (("plan", plan_is_right(oracle.seed, task, text)),)] += p
                continue
            for draw, weight in _midpoints(oracle.config):
                value = oracle._decide(role, oracle.workers[worker], task, own, seen, plans, draw,
                                       uniform(oracle.seed, "wrong", worker, task.id))
                if (value, worker, role) not in stated:  # read back once: the same reply reads the same
                    stated[(value, worker, role)] = _stated(task, value, oracle, worker, role.value, style)
                following[state + (("answer", stated[(value, worker, role)]),)] += p * weight
        states = dict(following)
    return sum(p for state, p in states.items() if is_right(task, state[-1][1]))
