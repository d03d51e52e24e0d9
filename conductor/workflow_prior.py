"""A per-domain prior over a menu of small workflows, for the SFT warm start: each worker alone and each
"A solves, B checks" pair among the domain's best workers alone, measured on training questions and drawn
from by

    weight(m | d) = s(m) exp(r(m, d) / T) / sum_n s(n) exp(r(n, d) / T)

where r(m, d) is menu item m's mean reward on up to ``sft.prior_questions`` training questions of domain d
(through the run's own prompt, executor, pool, verifier and reward, token prices included; calls that fail
on infrastructure are left out), s(m) is ``sft.shapes``' weight for m's shape (solve or verify) and T is
``sft.prior_temperature``. The pairs are those among the ``sft.prior_top_workers`` best workers alone in d.

Why: the per-worker prior (conductor/worker_prior.py) draws every step's worker from the same per-domain
weights, so its verify examples mostly have the domain's best worker check itself. A worker checking its own
answer keeps its own mistakes (conductor/simulator/oracle.py; real LLMs mostly do too) and adds its tokens:
the tiny paper-7 policy warm-started that way wrote gemini checking gemini on 72-86% of held-out math and
MMLU questions and scored exactly gemini alone, at 1.7 calls a question (docs/experiments.md, run P1). Measuring the
pairs puts into the examples the checker that adds most to each solver, and the price of its tokens decides,
per domain, whether a check is worth its calls at all.
Cost: workers x domains x ``prior_questions`` calls for the singles (as the per-worker prior), then
top_workers^2 x domains x ``prior_questions`` two-call workflows.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from conductor.config import Config
from conductor.example_workflows import MENU_SHAPE_OF_LENGTH, shape_workflow
from conductor.tasks.task import Task
from conductor.worker_prior import prior_tasks

MenuItem = tuple[str, ...]                # worker ids by step: (w,) w solves; (a, b) a solves, b checks
MenuPrior = dict[str, dict[MenuItem, float]]  # domain -> item -> weight (each domain's weights sum to 1)


def item_shape(item: MenuItem) -> str:
    return MENU_SHAPE_OF_LENGTH[len(item)]


def item_name(item: MenuItem) -> str:
    """``gemini-2.5-pro`` or ``gemini-2.5-pro>claude-sonnet-4`` (as evaluate's solve_check method names a pair)."""
    return ">".join(item)


def pair_items(single_rewards: Mapping[str, float], top_workers: int) -> list[MenuItem]:
    """Every ordered pair (a worker may check itself) among the ``top_workers`` best workers alone."""
    best = sorted(single_rewards, key=lambda worker: (-single_rewards[worker], worker))[:top_workers]
    return [(solver, checker) for solver in best for checker in best]


def menu_prior(rewards: Mapping[str, Mapping[MenuItem, float]], shapes: Mapping[str, float],
               temperature: float) -> MenuPrior:
    """Each domain's measured items as the weights of the formula above."""
    if temperature <= 0:
        raise ValueError("sft.prior_temperature must be > 0")
    prior = {}
    for domain, by_item in rewards.items():
        if not by_item:
            raise ValueError(f"no menu item of domain {domain} was measured: every call failed on infrastructure")
        top = max(by_item.values())
        scores = {item: shapes.get(item_shape(item), 0.0) * math.exp((reward - top) / temperature)
                  for item, reward in by_item.items()}
        total = sum(scores.values())
        if total <= 0:
            raise ValueError(f"no menu item of domain {domain} has a shape sft.shapes weighs above 0")
        prior[domain] = {item: score / total for item, score in scores.items() if score > 0}
    return prior


def roster_menu(prior: MenuPrior, domain: str, worker_ids: Sequence[str]) -> list[tuple[tuple[int, ...], float]]:
    """The domain's items as (shown worker indices, weight) for a prompt's roster; items naming a worker the
    roster does not show are left out. Empty for a domain the prior never measured."""
    shown = {worker: index for index, worker in enumerate(worker_ids)}
    return [(tuple(shown[worker] for worker in item), weight) for item, weight in prior.get(domain, {}).items()
            if all(worker in shown for worker in item)]


async def measure_items(config: Config, tasks: Sequence[Task], items: Sequence[MenuItem], tokenizer: Any, pool: Any,
                        seed: int = 0) -> dict[MenuItem, float]:
    """item -> mean reward over ``tasks`` (on the pool's full roster in its configured order, one round: a
    recursive round would ask the same fixed workflow again). An item whose every call failed on
    infrastructure is left out."""
    from conductor.baselines import FixedWorkflows
    from conductor.rollout import RolloutRunner

    config = config.model_copy(update={"pool": config.pool.model_copy(update={"subset_size": None}),
                                       "rollout": config.rollout.model_copy(update={"recursive_fraction": 0.0})})
    index = {worker.id: position for position, worker in enumerate(config.pool.workers)}
    means = {}
    for item in items:
        workflow = shape_workflow(item_shape(item), [index[worker] for worker in item])
        runner = RolloutRunner(config, tokenizer, FixedWorkflows(lambda workflow=workflow: workflow), pool, seed=seed)
        rewards = [record.reward for record in await runner.run(list(tasks), group_size=1) if record.reward is not None]
        if rewards:
            means[item] = sum(rewards) / len(rewards)
    return means


def measure_menu(config: Config, tasks: Sequence[Task], tokenizer: Any,
                 seed: int = 0) -> tuple[MenuPrior, dict[str, dict[MenuItem, float]]]:
    """The prior over an in-process pool (the config's providers and limits), and the mean rewards it came
    from (for the run's log): singles first, then the pairs among each domain's best singles."""
    from conductor.local_pool import on_local_pool

    by_domain: dict[str, list[Task]] = defaultdict(list)
    for task in prior_tasks(tasks, config.sft.prior_questions, seed):
        by_domain[task.domain].append(task)
    singles = [(worker.id,) for worker in config.pool.workers] if config.sft.shapes.get("solve", 0) > 0 else []
    with_pairs = config.sft.shapes.get("verify", 0) > 0

    async def measure(pool: Any) -> dict[str, dict[MenuItem, float]]:
        rewards = {}
        for domain, domain_tasks in sorted(by_domain.items()):
            alone = await measure_items(config, domain_tasks, [(w.id,) for w in config.pool.workers],
                                        tokenizer, pool, seed)
            pairs = pair_items({item[0]: r for item, r in alone.items()}, config.sft.prior_top_workers)
            measured = {item: alone[item] for item in singles if item in alone}
            if with_pairs:
                measured |= await measure_items(config, domain_tasks, pairs, tokenizer, pool, seed)
            rewards[domain] = measured
        return rewards

    rewards = on_local_pool(config.pool, measure, seed=seed)
    return menu_prior(rewards, config.sft.shapes, config.sft.prior_temperature), rewards
