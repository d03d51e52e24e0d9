"""A domain-conditioned worker prior for the SFT warm start: which worker to name in a question's example
workflows, from how each worker does alone on training questions of that domain under the run's reward.

    weight(w | d) = exp(r(w, d) / T) / sum_v exp(r(v, d) / T)

where r(w, d) is worker w's mean reward on up to ``sft.prior_questions`` training questions of domain d
(one single-step workflow each, through the run's own prompt, executor, pool and verifier; calls that fail
on infrastructure are left out), and T is ``sft.prior_temperature``. T -> 0 names the best worker alone;
a large T approaches the uniform draw.

Why: a policy warm-started on uniformly random workers must learn *which worker for which kind of
question* from GRPO's per-question signal alone. The pretrained 135M SmolLM2 drifted to one worker for
every domain within 40 steps instead (docs/experiments.md, runs F and G). This warm start is offline
reward-weighted regression over the training split, with the domain as the context: GRPO then starts
from a policy that already routes by domain and still samples the other workers at a rate T sets.
Cost: workers x domains x ``prior_questions`` calls, once per run (reused with the SFT checkpoint).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from conductor.config import Config
from conductor.tasks.task import Task

if TYPE_CHECKING:
    from conductor.local_pool import SpendSink

Prior = dict[str, dict[str, float]]  # domain -> worker id -> weight (each domain's weights sum to 1)


def prior_tasks(tasks: Sequence[Task], per_domain: int, seed: int) -> list[Task]:
    """Up to ``per_domain`` training questions of each domain, drawn without replacement (seeded)."""
    by_domain: dict[str, list[Task]] = defaultdict(list)
    for task in tasks:
        by_domain[task.domain].append(task)
    rng = random.Random(seed)
    chosen = []
    for domain in sorted(by_domain):
        pool = by_domain[domain]
        chosen += rng.sample(pool, min(per_domain, len(pool)))
    return chosen


def softmax_prior(mean_rewards: Mapping[str, Mapping[str, float]], temperature: float) -> Prior:
    """Each domain's mean rewards (worker id -> reward) as softmax weights at ``temperature``."""
    if temperature <= 0:
        raise ValueError("sft.prior_temperature must be > 0")
    prior = {}
    for domain, rewards in mean_rewards.items():
        top = max(rewards.values())
        scores = {worker: math.exp((reward - top) / temperature) for worker, reward in rewards.items()}
        total = sum(scores.values())
        prior[domain] = {worker: score / total for worker, score in scores.items()}
    return prior


async def measure_mean_rewards(config: Config, tasks: Sequence[Task], tokenizer: Any, pool: Any,
                               seed: int = 0) -> dict[str, dict[str, float]]:
    """domain -> worker id -> mean reward of that worker answering the domain's ``tasks`` alone. A worker
    whose every call in a domain failed on infrastructure is missing from that domain. A cost-dial run's
    rewards are priced at its balanced setting (conductor/cost_dial.py)."""
    from conductor.baselines import FixedRouter
    from conductor.rollout import RolloutRunner

    config = config.model_copy(update={"pool": config.pool.model_copy(update={"subset_size": None})})
    rewards: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for index, worker in enumerate(config.pool.workers):
        runner = RolloutRunner(config, tokenizer, FixedRouter(lambda index=index: index), pool, seed=seed)
        for record in await runner.run(list(tasks), group_size=1, cost_quality=runner.dial and runner.dial.default):
            if record.reward is not None and record.domain is not None:
                rewards[record.domain][worker.id].append(record.reward)
    return {domain: {worker: sum(values) / len(values) for worker, values in by_worker.items()}
            for domain, by_worker in rewards.items()}


def measure_prior(config: Config, tasks: Sequence[Task], tokenizer: Any, seed: int = 0,
                  on_spend: Optional[SpendSink] = None) -> tuple[Prior, dict]:
    """The prior over an in-process pool (the config's providers and limits), and the mean rewards it
    came from (for the run's log); ``on_spend`` is told what the pool spent."""
    from conductor.local_pool import on_local_pool

    chosen = prior_tasks(tasks, config.sft.prior_questions, seed)
    mean_rewards = on_local_pool(config.pool, lambda pool: measure_mean_rewards(config, chosen, tokenizer, pool, seed),
                                 seed=seed, on_spend=on_spend)
    return softmax_prior(mean_rewards, config.sft.prior_temperature), mean_rewards


def random_prior(domains: Iterable[str], worker_ids: Sequence[str], temperature: float, seed: int) -> Prior:
    """Each domain's weights as the softmax at ``temperature`` of scores drawn uniformly from [0, 1]
    (``sft.worker_prior: random``): a preference per domain that knows nothing of what pays.

    Why: after a warm start on uniform workers, the policy's worker id does not depend on the question (the
    targets never did), so every GRPO group moves one shared preference, and on paper-7 it went to the same
    worker in every domain (docs/experiments.md, runs rl2-rl4). A random preference per domain makes the worker
    id depend on the domain from the start, so GRPO's per-domain signal has a per-domain place to go."""
    rng = random.Random(f"random-prior-{seed}")
    return softmax_prior({domain: {worker: rng.random() for worker in worker_ids} for domain in sorted(domains)},
                         temperature)


def roster_weights(prior: Prior, domain: str, worker_ids: Sequence[str]) -> list[float]:
    """The prior's weights for a prompt's roster (in its shown order): uniform for a domain the prior never
    measured, and a worker it never measured gets the domain's lowest weight (not none)."""
    weights = prior.get(domain)
    if not weights:
        return [1.0] * len(worker_ids)
    floor = min(weights.values())
    return [weights.get(worker, floor) for worker in worker_ids]
