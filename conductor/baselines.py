"""Fixed routers to compare a trained Conductor against: every question to worker k (one baseline per
worker; the best of them is "the best single worker"), every question to a uniformly random worker, and
the per-domain table: each domain's questions to the worker that answered most of them (from the single
workers' own outcomes on the same questions, so no extra calls). Chosen on the split it is scored on, the
table is the best any router that reads only the question's domain can do there: on the toy, perfect
routing, which ranges from 0.83 to 0.92 over seeds 0-4's held-out splits.

They are generators (the ``Generator`` protocol of conductor/rollout.py) that write a one-step workflow
instead of sampling one, so they run through exactly the same prompt, executor, pool and verifier as the
policy, and their accuracies are comparable with its own.

``SOLVE_ALONE`` is the one subtask every single-worker baseline gives its worker: these routers (so
``summary.json`` and the measured worker prior), and the evaluation's fixed methods and trained routers
(conductor/evaluation/), so the best single worker is the same worker asked the same thing in both. It is
the evaluation's wording; the Conductor's own words for a solve step are conductor/example_workflows.py's.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Optional

from conductor.config import Config
from conductor.pool import WorkerPoolClient
from conductor.rollout import RolloutRunner, Sample, SamplingSettings
from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import summarise
from conductor.tasks.task import Task
from conductor.workflow import Step, Workflow

if TYPE_CHECKING:
    from conductor.local_pool import SpendSink

SOLVE_ALONE = "Solve the question and give the final answer in the format the question asks for."
RANDOM, DOMAIN_TABLE = "random", "domain_table"  # the baselines' keys beside the workers' ids


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
        super().__init__(lambda: Workflow((Step(choose(), SOLVE_ALONE, ()),)))


async def evaluate_baselines(config: Config, tasks: Sequence[Task], tokenizer: Any, pool: WorkerPoolClient,
                             seed: int = 0) -> dict[str, dict[str, float]]:
    """The rollout summary (accuracy over scored questions, infra errors counted apart) of each single
    worker (keyed by worker id) and of the random router (key ``random``), on the full roster in its
    configured order; and the per-domain table's accuracy (key ``domain_table``)."""
    config = config.model_copy(update={"pool": config.pool.model_copy(update={"subset_size": None})})
    workers = config.pool.workers
    rng = random.Random(seed)
    routers = {worker.id: FixedRouter(lambda index=index: index) for index, worker in enumerate(workers)}
    routers[RANDOM] = FixedRouter(lambda: rng.randrange(len(workers)))
    results, outcomes = {}, {}
    for name, router in routers.items():
        runner = RolloutRunner(config, tokenizer, router, pool, seed=seed)
        outcomes[name] = await runner.run(list(tasks), group_size=1)
        results[name] = summarise(outcomes[name]).as_dict()
    results[DOMAIN_TABLE] = {"accuracy": domain_table_accuracy({name: records for name, records in outcomes.items()
                                                                if name != RANDOM})}
    return results


def domain_table_accuracy(outcomes: dict[str, Sequence[RolloutRecord]]) -> float:
    """Each domain's questions answered by the worker right on most of them: accuracy over the questions
    every worker had scored (an infrastructure error leaves a question out of the table's count)."""
    scored: dict[str, dict[str, bool]] = {}
    for worker, records in outcomes.items():
        for record in records:
            if record.infra_error is None:
                scored.setdefault(worker, {})[record.question_id] = record.correct
    questions = set.intersection(*(set(answers) for answers in scored.values())) if scored else set()
    domains = {r.question_id: r.domain or "" for records in outcomes.values() for r in records}
    right = 0
    for domain in {domains[q] for q in questions}:
        mine = [q for q in questions if domains[q] == domain]
        right += max(sum(answers[q] for q in mine) for answers in scored.values())
    return right / len(questions) if questions else 0.0


def run_baselines(config: Config, tasks: Sequence[Task], tokenizer: Any, seed: int = 0,
                  on_spend: Optional[SpendSink] = None) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """``evaluate_baselines`` over an in-process pool (the same providers and limits as the config), and what
    that pool spent, by provider. ``on_spend`` is told that spend however the measurement ends, a stop or an
    error midway included: the run's spend cap counts it (conductor/spend_meter.py)."""
    from conductor.local_pool import on_local_pool

    spent: dict[str, float] = {}

    def counted(by_provider: dict[str, float], unsettled: dict[str, float]) -> None:
        spent.update(by_provider)
        if on_spend is not None:
            on_spend(by_provider, unsettled)

    results = on_local_pool(config.pool, lambda pool: evaluate_baselines(config, tasks, tokenizer, pool, seed),
                            seed=seed, on_spend=counted)
    return results, spent
