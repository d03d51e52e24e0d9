"""What a training run's measurements outside its loop will cost, estimated before each starts, so that the
spend cap (conductor/spend_cap.py, ``setup_stop``) can refuse one that would pass it. The loop's own rule
projects each step from the steps before it; these come first and have nothing to project from:

- the warm start's measured prior (``sft.worker_prior: domain_reward``): every worker alone on up to
  ``sft.prior_questions`` training questions a domain; its measured menu (``workflow_reward``) adds, where
  ``sft.shapes`` has a verify step, the ordered pairs among each domain's ``sft.prior_top_workers`` best
  workers (top^2 solve-then-check workflows on the same questions);
- the held-out baselines: every worker alone, and the random router, on each held-out question.

Each call is priced as conductor/evaluation/cost_estimate.py prices one (the question's characters / 4 plus
instructions, a 400-token answer, a check reading one answer; a judge's calls where the question is judged),
by provider. As rough as that, and it errs both ways: on paper-7 (configs/train-paper7.yaml, the preset's
prices) the held-out baselines cost $13.82 against an estimate of $7.46 and the measured menu $120.68 against
$74.17 (reasoning models answer at length); on the toy's one-line answers it is ~20x too high. So the setup
rule can stop a run early, and a measurement dearer than HEADROOM x its estimate passes a cap by the excess.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Optional, Protocol

from conductor.config import Config
from conductor.evaluation.cost_estimate import Call, Pricing, billed_calls, question_tokens
from conductor.judge_config import judge_worker
from conductor.spend_meter import ByProvider
from conductor.tasks.task import Task
from conductor.worker_prior import prior_tasks


class SetupSpend(Protocol):
    """What a measurement outside the loop tells the run's spend (cluster/run_spend.py implements it)."""

    def check(self, estimate: ByProvider, what: str) -> None:
        """Raise conductor.spend_cap.SetupStopped when ``what``, estimated at ``estimate``, would pass a cap."""

    def add(self, spent: ByProvider, unsettled: Optional[ByProvider] = None, *, phase: str) -> None:
        """``spent`` by an in-process pool, counted under ``phase`` (``warm_start``, ``baselines``), and its
        attempts whose bill is unknown at their worst case (``unsettled``)."""


class WorkflowPricer:
    def __init__(self, config: Config):
        self.config, self.pricing = config, Pricing(config)
        self.provider = {w.id: w.provider or "" for w in (*config.pool.workers, *config.pool.judges)}
        self.judge = judge_worker(config.judge, config.pool)

    def cost(self, task: Task, workflow: Sequence[Call]) -> ByProvider:
        """One fixed workflow on ``task``, and its answer's ``judge.samples`` judge calls where it is judged."""
        tokens = question_tokens(task)
        total: dict[str, float] = defaultdict(float)
        for worker, earlier in billed_calls(task, workflow, self.judge, self.config.judge.samples):
            total[self.provider[worker]] += self.pricing.cost(worker, tokens, earlier, False)
        return total


def summed(parts: Sequence[tuple[float, ByProvider]]) -> ByProvider:
    """The weighted sum of costs by provider."""
    total: dict[str, float] = defaultdict(float)
    for weight, cost in parts:
        for provider, usd in cost.items():
            total[provider] += weight * usd
    return dict(total)


def baselines_estimate(config: Config, tasks: Sequence[Task]) -> ByProvider:
    """Every worker alone on each of ``tasks``, and the random router's one call (a worker drawn uniformly:
    each worker alone weighed 1/n)."""
    pricer, workers = WorkflowPricer(config), [w.id for w in config.pool.workers]
    return summed([(1 + 1 / len(workers), pricer.cost(task, [(worker, 0)])) for task in tasks for worker in workers])


def measurement_estimate(config: Config, train_tasks: Sequence[Task]) -> Optional[ByProvider]:
    """The warm start's measured prior or menu on its questions; None where the configured warm start measures
    nothing (no SFT, or uniform or random workers). Which pairs the menu measures depends on the singles'
    results: they are priced as the pairs among the dearest workers, so the estimate errs high."""
    measured = config.sft.worker_prior
    if not config.sft.steps or measured not in ("domain_reward", "workflow_reward"):
        return None
    pricer, workers = WorkflowPricer(config), [w.id for w in config.pool.workers]
    top = min(config.sft.prior_top_workers, len(workers))
    dearest = sorted(workers, key=lambda w: -pricer.pricing.cost(w, 0, 1, False))[:top]
    workflows = [[(worker, 0)] for worker in workers]
    if measured == "workflow_reward" and config.sft.shapes.get("verify", 0) > 0:
        workflows += [[(solver, 0), (checker, 1)] for solver in dearest for checker in dearest]
    return summed([(1.0, pricer.cost(task, workflow))
                   for task in prior_tasks(train_tasks, config.sft.prior_questions, config.seed)
                   for workflow in workflows])
