"""Fixed routers to compare a trained Conductor against: every question to worker k (one baseline per
worker; the best of them is "the best single worker"), and every question to a uniformly random worker.

They are generators (the ``Generator`` protocol of conductor/rollout.py) that write a one-step workflow
instead of sampling one, so they run through exactly the same prompt, executor, pool and verifier as the
policy, and their accuracies are comparable with its own.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from conductor.config import Config
from conductor.pool import WorkerPoolClient
from conductor.rollout import RolloutRunner, Sample, SamplingSettings
from conductor.rollout_summary import summarise
from conductor.tasks.task import Task
from conductor.workflow import Step, Workflow

SUBTASK = "Solve the question and give the final answer in the requested format."


class FixedWorkflows:
    """A generator that writes ``write()``'s workflow for every sample instead of sampling one (a fixed
    router here; a measured menu item in conductor/workflow_prior.py)."""

    def __init__(self, write: Callable[[], Workflow]):
        self.write = write

    async def generate(self, prompts: list[list[int]], n: int, sampling: SamplingSettings) -> list[list[Sample]]:
        return [[Sample(prompt_token_ids=list(prompt), token_ids=[], logprobs=[], text=self.write().render(),
                        finish_reason="stop", policy_version=-1) for _ in range(n)] for prompt in prompts]


class FixedRouter(FixedWorkflows):
    """Every sample to worker ``choose()``, in one step."""

    def __init__(self, choose: Callable[[], int]):
        super().__init__(lambda: Workflow((Step(choose(), SUBTASK, ()),)))


async def evaluate_baselines(config: Config, tasks: Sequence[Task], tokenizer: Any, pool: WorkerPoolClient,
                             seed: int = 0) -> dict[str, dict[str, float]]:
    """The rollout summary (accuracy over scored questions, infra errors counted apart) of each single
    worker (keyed by worker id) and of the random router (key ``random``), on the full roster in its
    configured order."""
    config = config.model_copy(update={"pool": config.pool.model_copy(update={"subset_size": None})})
    workers = config.pool.workers
    rng = random.Random(seed)
    routers = {worker.id: FixedRouter(lambda index=index: index) for index, worker in enumerate(workers)}
    routers["random"] = FixedRouter(lambda: rng.randrange(len(workers)))
    results = {}
    for name, router in routers.items():
        runner = RolloutRunner(config, tokenizer, router, pool, seed=seed)
        results[name] = summarise(await runner.run(list(tasks), group_size=1)).as_dict()
    return results


def run_baselines(config: Config, tasks: Sequence[Task], tokenizer: Any, seed: int = 0) -> dict[str, dict[str, float]]:
    """``evaluate_baselines`` over an in-process pool (the same providers and limits as the config)."""
    from conductor.local_pool import on_local_pool

    return on_local_pool(config.pool, lambda pool: evaluate_baselines(config, tasks, tokenizer, pool, seed), seed=seed)
