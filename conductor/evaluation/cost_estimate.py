"""What an evaluation will cost, estimated before it starts: cluster/evaluate.py prints it (and so every
``make results-*``) when the pool has paid providers (not a simulated or loopback one).

How rough: each method's calls per question come from its shape (``calls_per_question``), each call's
prompt is the question's characters / 4 (the pool's own estimate) plus PROMPT_OVERHEAD_TOKENS of
instructions plus ANSWER_TOKENS for every earlier answer it reads, and every answer is ANSWER_TOKENS long
(at most the worker's max_tokens), all at the worker's prices. Answers vary far more than that: a reasoning
model's hidden tokens can make a call several times dearer, a terse answer a fraction. Read ``expected``
as right within a factor of 2 to 3. ``high`` lets every answer run to its max_tokens: the most the
configured limits allow, except for a Conductor, which is counted at its max_steps whatever it writes.
A judge, where judged questions have one, adds ``judge.samples`` calls per answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from conductor.config import Config, WorkerSpec
from conductor.evaluation.conductor_method import CONDUCTOR_METHODS
from conductor.evaluation.fixed_methods import CONSENSUS_SAMPLES, SELF_REFLECTION_CALLS
from conductor.evaluation.registry import MethodSpec, get
from conductor.judge_config import judge_worker
from conductor.tasks.task import Task
from conductor.verifiers import registry as verifiers

ANSWER_TOKENS = 400
PROMPT_OVERHEAD_TOKENS = 60
CHARS_PER_TOKEN = 4

Call = tuple[Optional[str], int]  # (worker id, None: the pool's mean worker; earlier answers it reads)


def calls_per_question(name: str, workers: Sequence[str], config: Config) -> list[Call]:
    """One attempt's calls for a method row named ``name`` (``single:w``, ``moa``, a Conductor's name)."""
    kind, _, named = name.partition(":")
    chosen = named.split(">") if named else []
    if kind.startswith(CONDUCTOR_METHODS[0]):  # any Conductor name (evaluate.conductor_name): up to max_steps
        rounds = 1 + config.executor.max_rounds if kind.endswith("_recursive") else 1
        return [(None, step) for _ in range(rounds) for step in range(config.executor.max_steps)]
    shapes: dict[str, list[Call]] = {
        "random": [(None, 0)],
        "moa": [*((worker, 0) for worker in workers), (None, len(workers))],
    }
    if chosen:
        shapes.update({
            "single": [(chosen[0], 0)],
            "self_reflection": [(chosen[0], index) for index in range(SELF_REFLECTION_CALLS)],
            "consensus": [(chosen[0], 0)] * CONSENSUS_SAMPLES,
            "solve_check": [(chosen[0], 0), (chosen[-1], 1)],
        })
    return shapes.get(kind, [(worker, 0) for worker in workers])  # the rest ask every worker once


def method_spec(name: str) -> Optional[MethodSpec]:
    kind = name.partition(":")[0]
    try:
        return get(kind)
    except ValueError:  # a Conductor under its report name
        return None


@dataclass(frozen=True)
class CostEstimate:
    expected: float
    high: float
    calls: int

    def line(self) -> str:
        return (f"expected cost: about ${self.expected:.2f} for {self.calls:,} worker calls (rough: within a "
                f"factor of 2-3; at most ${self.high:.2f} if every answer ran to its max_tokens)")


class Pricing:
    def __init__(self, config: Config):
        self.workers = {w.id: w for w in (*config.pool.workers, *config.pool.judges)}
        self.roster = [w.id for w in config.pool.workers]

    def cost(self, worker: Optional[str], question_tokens: int, earlier: int, full: bool) -> float:
        """One call; ``worker`` None is the mean over the roster."""
        if worker is None:
            return sum(self.cost(w, question_tokens, earlier, full) for w in self.roster) / len(self.roster)
        spec: WorkerSpec = self.workers[worker]
        answer = spec.sampling.max_tokens if full else min(ANSWER_TOKENS, spec.sampling.max_tokens)
        prompt = question_tokens + PROMPT_OVERHEAD_TOKENS + earlier * answer
        return (prompt * (spec.price_in_per_m or 0.0) + answer * (spec.price_out_per_m or 0.0)) / 1e6


def billed_calls(task: Task, shape: Sequence[Call], judge: Optional[str], samples: int) -> list[Call]:
    """``shape``'s calls on ``task``, then ``samples`` judge calls on its answer where ``task`` is judged."""
    judged = judge is not None and verifiers.get(task.verifier).by_judge
    return [*shape, *([(judge, 1)] * samples if judged else [])]


def question_tokens(task: Task) -> int:
    return len(task.prompt) // CHARS_PER_TOKEN


def estimate(config: Config, methods: Sequence[str], tasks: Sequence[Task], train: Sequence[Task] = ()) -> CostEstimate:
    """The evaluation of ``methods`` (built rows' names) over ``tasks``, ``evaluate.repeats`` times. A trained
    router asks one worker per scored question, and every worker once on each train question (its table)."""
    pricing, judge = Pricing(config), judge_worker(config.judge, config.pool)
    expected = high = 0.0
    calls = 0
    table_counted = False  # the routers that share the routing table measure it once between them
    for name in methods:
        spec = method_spec(name)
        if spec is not None and spec.derived:
            continue
        trained = spec is not None and spec.trained
        every_worker = [(worker, 0) for worker in pricing.roster]
        scored = [(task, config.evaluate.repeats, [(None, 0)] if trained else calls_per_question(
            name, pricing.roster, config)) for task in tasks]
        measures = trained and not (spec.routing_table and table_counted)
        table_counted = table_counted or (trained and spec.routing_table)
        scored += [(task, 1, every_worker) for task in (train if measures else ())]
        for task, times, shape in scored:
            tokens, billed = question_tokens(task), billed_calls(task, shape, judge, config.judge.samples)
            expected += times * sum(pricing.cost(w, tokens, earlier, False) for w, earlier in billed)
            high += times * sum(pricing.cost(w, tokens, earlier, True) for w, earlier in billed)
            calls += times * len(billed)
    return CostEstimate(expected, high, calls)
