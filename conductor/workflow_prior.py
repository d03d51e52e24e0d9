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

A cost-dial run (conductor/cost_dial.py) gets one menu per setting: the same calls, their rewards priced
at each setting's weight, and the pairs among each setting's best workers alone (the union over settings is
measured). The warm start then draws a prompt's examples from the menu of the setting its prompt states, so
GRPO starts from a policy that already reads the setting.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from conductor.config import Config
from conductor.cost_dial import card_of
from conductor.example_workflows import MENU_SHAPE_OF_LENGTH, shape_workflow
from conductor.rewards import RewardConfig, reward
from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import worker_tokens
from conductor.tasks.task import Task
from conductor.worker_prior import prior_tasks

if TYPE_CHECKING:
    from conductor.local_pool import SpendSink

MenuItem = tuple[str, ...]                # worker ids by step: (w,) w solves; (a, b) a solves, b checks
MenuPrior = dict[str, dict[MenuItem, float]]  # domain -> item -> weight (each domain's weights sum to 1)
Setting = Optional[int]  # the cost-dial setting rewards are priced at; None: the run's one price


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


def priced_mean(records: Sequence[RolloutRecord], rewards: RewardConfig, weight: Optional[float]) -> Optional[float]:
    """The scored records' mean reward, each priced again at the cost dial's ``weight`` (None: as scored)."""
    scored = [r for r in records if r.reward is not None]
    values = [r.reward if weight is None else reward(
        format_ok=r.format_ok, correct=r.correct, cost_usd=r.cost_usd, worker_tokens=worker_tokens(r),
        infra_error=False, settings=rewards, score=r.score, cost_weight=weight) for r in scored]
    return sum(values) / len(values) if values else None


async def measure_items(config: Config, tasks: Sequence[Task], items: Sequence[MenuItem], tokenizer: Any, pool: Any,
                        seed: int = 0) -> dict[Setting, dict[MenuItem, float]]:
    """setting -> item -> mean reward over ``tasks`` (on the pool's full roster in its configured order, one
    round: a recursive round would ask the same fixed workflow again); one setting, None, without a dial.
    An item whose every call failed on infrastructure is left out."""
    from conductor.baselines import FixedWorkflows
    from conductor.rollout import RolloutRunner

    config = config.model_copy(update={"pool": config.pool.model_copy(update={"subset_size": None}),
                                       "rollout": config.rollout.model_copy(update={"recursive_fraction": 0.0})})
    index = {worker.id: position for position, worker in enumerate(config.pool.workers)}
    dial = card_of(config.reward)
    weights = {None: None} if dial is None else {setting: dial.weight(setting) for setting in dial.settings}
    means: dict[Setting, dict[MenuItem, float]] = {setting: {} for setting in weights}
    for item in items:
        workflow = shape_workflow(item_shape(item), [index[worker] for worker in item])
        runner = RolloutRunner(config, tokenizer, FixedWorkflows(lambda workflow=workflow: workflow), pool, seed=seed)
        records = await runner.run(list(tasks), group_size=1, cost_quality=dial and dial.default)
        for setting, weight in weights.items():
            mean = priced_mean(records, config.reward, weight)
            if mean is not None:
                means[setting][item] = mean
    return means


def measure_menu(config: Config, tasks: Sequence[Task], tokenizer: Any, seed: int = 0,
                 on_spend: Optional[SpendSink] = None,
                 ) -> tuple[dict[Setting, MenuPrior], dict[Setting, dict[str, dict[MenuItem, float]]]]:
    """The prior over an in-process pool (the config's providers and limits), and the mean rewards it came
    from (for the run's log): singles first, then the pairs among each domain's best singles. Both by
    cost-dial setting (one, None, without a dial). ``on_spend`` is told what the pool spent."""
    from conductor.local_pool import on_local_pool

    by_domain: dict[str, list[Task]] = defaultdict(list)
    for task in prior_tasks(tasks, config.sft.prior_questions, seed):
        by_domain[task.domain].append(task)
    singles = [(worker.id,) for worker in config.pool.workers] if config.sft.shapes.get("solve", 0) > 0 else []
    with_pairs = config.sft.shapes.get("verify", 0) > 0

    async def measure(pool: Any) -> dict[Setting, dict[str, dict[MenuItem, float]]]:
        rewards: dict[Setting, dict[str, dict[MenuItem, float]]] = defaultdict(dict)
        for domain, domain_tasks in sorted(by_domain.items()):
            alone = await measure_items(config, domain_tasks, [(w.id,) for w in config.pool.workers],
                                        tokenizer, pool, seed)
            pairs = list(dict.fromkeys(pair for by_item in alone.values() for pair in pair_items(
                {item[0]: r for item, r in by_item.items()}, config.sft.prior_top_workers)))
            paired = await measure_items(config, domain_tasks, pairs, tokenizer, pool, seed) if with_pairs else {}
            for setting, by_item in alone.items():
                best = set(pair_items({item[0]: r for item, r in by_item.items()}, config.sft.prior_top_workers))
                measured = {item: by_item[item] for item in singles if item in by_item}
                measured |= {item: r for item, r in paired.get(setting, {}).items() if item in best}
                rewards[setting][domain] = measured
        return dict(rewards)

    rewards = on_local_pool(config.pool, measure, seed=seed, on_spend=on_spend)
    return ({setting: menu_prior(by_domain, config.sft.shapes, config.sft.prior_temperature)
             for setting, by_domain in rewards.items()}, rewards)
