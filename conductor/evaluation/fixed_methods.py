"""The methods a user would try before a trained Conductor, each a fixed workflow over the pool.

They run through the same executor and pool as the Conductor's own workflows, so their calls, tokens,
dollars and latency are counted the same way. Deviations from the reference designs are noted on each.

- ``single:<worker>``: every question to one worker (the best of them is "the best single worker").
- ``random``: every question to a uniformly random worker (drawn per question and repeat).
- ``self_reflection:<worker>``: 5 calls to one worker; each revision sees every earlier attempt
  (Reflexion-style self-refine with no external feedback, as the paper ran it: 5x).
- ``consensus:<worker>``: 5 independent samples of one worker (distinct sampling seeds, temperature 0.7),
  majority vote over their stated answers; ties go to the earliest sample. The vote is computed, not
  asked of a model, so it costs no call.
- ``solve_check:<solver>><checker>``: one worker solves, a second (the same one allowed) sees its answer
  and checks it: a two-step workflow a user would write by hand, and the simplest thing a Conductor can
  learn beyond routing. On ``paper-7`` it shows what a verifier adds in each domain, and at what tokens.
- ``moa``: Mixture-of-Agents as the paper ran it: one proposer layer (every worker answers alone), then a
  randomly drawn worker aggregates all proposals: 8 calls with 7 workers. Deviation: the proposals reach
  the aggregator as earlier turns of its conversation (the executor's format), where MoA's reference code
  lists them in a system message; the instruction is MoA's in substance, in our words.

The oracle (right if any single worker is right) needs no calls of its own: the report derives it from
the single-worker rows. A worker answering alone is asked in ``SOLVE_ALONE``'s words (conductor/baselines.py),
as training's baselines ask it, so both name the same best single worker.
"""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass

from conductor.baselines import SOLVE_ALONE
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.registry import MethodSpec
from conductor.tasks.task import Task
from conductor.verifiers.answer_key import answer_key, final_value
from conductor.workflow import ALL, Step, Workflow

REFLECT = ("Review all of your earlier attempts above, find any mistakes in them, and give an improved final "
           "answer in the format the question asks for.")
AGGREGATE = ("Several models have answered the question above. Synthesize their responses into one answer of "
             "the highest quality: evaluate them critically, since some may be wrong or biased, do not just "
             "copy one of them, and give a refined, accurate final answer in the format the question asks for.")
CHECK = ("Check the answer above for mistakes, fix any you find, and give the final answer in the format the "
         "question asks for.")
SELF_REFLECTION_CALLS = 5
CONSENSUS_SAMPLES = 5
CONSENSUS_TEMPERATURE = 0.7


def every_worker_alone(workers: int) -> Workflow:
    """Each worker answers the question alone, all in parallel (MoA's proposers, Smoothie, the routers' table)."""
    return Workflow(tuple(Step(w, SOLVE_ALONE, ()) for w in range(workers)))


async def run_workflow(context: MethodContext, workflow: Workflow, task: Task, step_params=None) -> Attempt:
    result = await context.executor.execute(workflow, task.prompt, context.roster, step_params=step_params)
    return Attempt(answer=result.answer, steps=result.steps, infra_error=result.infra_error)


@dataclass
class SingleWorker:
    name: str
    context: MethodContext
    worker: int

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        return await run_workflow(self.context, Workflow((Step(self.worker, SOLVE_ALONE, ()),)), task)


@dataclass
class RandomRouter:
    name: str
    context: MethodContext

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        worker = random.Random(f"{self.context.seed}:random:{task.id}:{repeat}").randrange(len(self.context.roster))
        return await run_workflow(self.context, Workflow((Step(worker, SOLVE_ALONE, ()),)), task)


@dataclass
class SelfReflection:
    name: str
    context: MethodContext
    worker: int
    calls: int = SELF_REFLECTION_CALLS

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        revisions = tuple(Step(self.worker, REFLECT, ALL) for _ in range(self.calls - 1))
        steps = (Step(self.worker, SOLVE_ALONE, ()),) + revisions
        return await run_workflow(self.context, Workflow(steps), task)


@dataclass
class Consensus:
    name: str
    context: MethodContext
    worker: int
    samples: int = CONSENSUS_SAMPLES

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        workflow = Workflow(tuple(Step(self.worker, SOLVE_ALONE, ()) for _ in range(self.samples)))
        params = [{"seed": repeat * self.samples + i, "temperature": CONSENSUS_TEMPERATURE}
                  for i in range(self.samples)]
        attempt = await run_workflow(self.context, workflow, task, params)
        if attempt.infra_error:
            return attempt
        attempt.answer = majority([s.response or "" for s in attempt.steps], task)
        return attempt


@dataclass
class SolveThenCheck:
    name: str
    context: MethodContext
    solver: int
    checker: int

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        steps = (Step(self.solver, SOLVE_ALONE, ()), Step(self.checker, CHECK, ALL))
        return await run_workflow(self.context, Workflow(steps), task)


@dataclass
class MixtureOfAgents:
    name: str
    context: MethodContext

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        count = len(self.context.roster)
        aggregator = random.Random(f"{self.context.seed}:moa:{task.id}:{repeat}").randrange(count)
        proposers = every_worker_alone(count).steps
        return await run_workflow(self.context, Workflow(proposers + (Step(aggregator, AGGREGATE, ALL),)), task)


def majority(responses: list[str], task: Task) -> str:
    """The response whose stated answer is the most common (the earliest among ties); responses that
    state no answer never win unless none does."""
    keys = []
    for text in responses:
        value = final_value(task, text)
        keys.append(None if value is None else answer_key(task, value))
    counts = collections.Counter(k for k in keys if k is not None)
    if not counts:
        return responses[0] if responses else ""
    top = max(counts.values())
    return next(text for text, key in zip(responses, keys) if key is not None and counts[key] == top)


SPECS = (MethodSpec("single", SingleWorker, "each"), MethodSpec("self_reflection", SelfReflection, "each"),
         MethodSpec("consensus", Consensus, "each"), MethodSpec("solve_check", SolveThenCheck, "pair"),
         MethodSpec("random", RandomRouter), MethodSpec("moa", MixtureOfAgents))
