"""Example workflows for the SFT warm start: valid workflows of named shapes with uniformly random workers
(or workers weighted by a measured prior: conductor/worker_prior.py; or drawn from a measured menu of
workflows: conductor/workflow_prior.py).

The warm start teaches the format and the *space* of workflows, not a preference: every worker is drawn
uniformly by default, and each shape comes with the plain-English subtasks a person would write for it, so GRPO
starts from a policy that already samples every shape it may learn to prefer. Shapes:

- ``solve``: one worker answers (routing);
- ``verify``: a worker answers, a second checks that answer and corrects it if needed;
- ``verify_chain``: a worker answers, two more check it in turn;
- ``aggregate``: two workers answer alone, a third reconciles their answers;
- ``plan``: a worker outlines an approach without solving, a second solves with the outline in view.

A policy that learns a shape learns it in these words; the simulated orchestra reads subtasks by their
meaning (conductor/simulator/roles.py), so the same words would steer a real LLM the same way. The
subtasks are short and share few words: on paper-7 prompts, the 656k-parameter tiny policy trained from
scratch wrote one subtask's words into another's place with longer phrasings that shared "the final
answer" and "the question" (150 SFT steps: no parsable workflow); with these, 400 steps give 12 of 12
greedy and 83% of samples at temperature 1 parsable.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Optional

from conductor.workflow import ALL, Step, Workflow

SOLVE = "Solve the question. Give the final answer."
VERIFY = "Check the answer above and fix any error."
AGGREGATE = "Reconcile the answers above."
PLAN = "Outline an approach. Do not solve."
SOLVE_WITH_PLAN = "Solve the question with the plan above."

RESTATE_PREFIX = "The question asks: "
SETTING_PREFIX = "Cost-quality setting "
KIND_PREFIX = "The question is of kind "

SHAPES = ("solve", "verify", "verify_chain", "aggregate", "plan")
Menu = Sequence[tuple[Sequence[int], float]]  # (shown worker indices, weight): conductor/workflow_prior.py
MENU_SHAPE_OF_LENGTH = {1: "solve", 2: "verify"}  # a menu item's workers by step: one solves; a solver, a checker


def shape_workflow(shape: str, workers: list[int]) -> Workflow:
    """The workflow of ``shape`` over ``workers`` (as many as the shape has steps)."""
    steps = {
        "solve": lambda w: (Step(w[0], SOLVE, ()),),
        "verify": lambda w: (Step(w[0], SOLVE, ()), Step(w[1], VERIFY, ALL)),
        "verify_chain": lambda w: (Step(w[0], SOLVE, ()), Step(w[1], VERIFY, (0,)), Step(w[2], VERIFY, (1,))),
        "aggregate": lambda w: (Step(w[0], SOLVE, ()), Step(w[1], SOLVE, ()), Step(w[2], AGGREGATE, ALL)),
        "plan": lambda w: (Step(w[0], PLAN, ()), Step(w[1], SOLVE_WITH_PLAN, ALL)),
    }
    if shape not in steps:
        raise ValueError(f"unknown workflow shape {shape!r}; known: {', '.join(SHAPES)}")
    return Workflow(steps[shape](workers))


def shape_steps(shape: str) -> int:
    return len(shape_workflow(shape, [0, 0, 0]).steps)


def random_workflow(weights: Mapping[str, float], num_workers: int, rng: random.Random,
                    worker_weights: Optional[Sequence[float]] = None) -> Workflow:
    """A workflow of a shape drawn by ``weights`` (relative, need not sum to 1) with uniform workers, or
    workers drawn by ``worker_weights`` (one per shown worker: conductor/worker_prior.py).
    Draw order (first worker, one uniform for the shape, the other workers) keeps a solve-only menu's
    examples identical to the earlier one-or-two-step sampler's, so seeded toy runs are unchanged."""
    if worker_weights is not None and len(worker_weights) != num_workers:
        raise ValueError(f"{len(worker_weights)} worker weights for {num_workers} workers")

    def worker() -> int:
        if worker_weights is None:
            return rng.randrange(num_workers)
        return rng.choices(range(num_workers), weights=worker_weights)[0]

    first = worker()
    shapes = [s for s, w in weights.items() if w > 0]
    point, total, shape = rng.random() * sum(weights[s] for s in shapes), 0.0, shapes[-1]
    for candidate in shapes:
        total += weights[candidate]
        if point < total:
            shape = candidate
            break
    others = [worker() for _ in range(shape_steps(shape) - 1)]
    return shape_workflow(shape, [first] + others)


def menu_workflow(menu: Menu, rng: random.Random) -> Workflow:
    """One (shown worker indices, weight) item of a measured menu (conductor/workflow_prior.py), drawn by
    weight: one index solves, two are a solver and its checker (the ``verify`` shape)."""
    if not menu:
        raise ValueError("an empty workflow menu")
    workers, _ = rng.choices(menu, weights=[weight for _, weight in menu])[0]
    shape = MENU_SHAPE_OF_LENGTH.get(len(workers))
    if shape is None:
        raise ValueError(f"a menu item of {len(workers)} workers; items have one (solve) or two (verify)")
    return shape_workflow(shape, list(workers))


def example_text(shapes: Mapping[str, float], num_workers: int, rng: random.Random,
                 worker_weights: Optional[Sequence[float]] = None, menu: Optional[Menu] = None,
                 plan: str = "") -> str:
    """One example completion of the warm start: ``plan`` (a plan line or nothing), then a workflow from
    ``menu`` when it has items, else of a shape drawn by ``shapes`` with workers uniform or by
    ``worker_weights``."""
    if menu:
        return plan + menu_workflow(menu, rng).render()
    return plan + random_workflow(shapes, num_workers, rng, worker_weights).render()


def restating_plan(question: str, words: int) -> str:
    """A plan line that restates the question's first ``words`` words (``sft.plan: restate``). It teaches the
    warm start to read the question into its own completion, with no label and no worker preference, so the
    worker ids a few tokens later sit next to what tells one kind of question from another. "=" is dropped:
    a plan line with one could pass for a list assignment (conductor/workflow_constraint.py)."""
    if words < 1:
        raise ValueError("a restating plan needs at least one word")
    opening = " ".join(question.replace("=", " ").split()[:words])
    return f"{RESTATE_PREFIX}{opening}\n"


def setting_plan(setting: int) -> str:
    """A plan line that states a cost-dial prompt's setting (``sft.plan: setting``). It teaches the warm start
    to copy the setting from its prompt into its own completion, so the worker ids a few tokens later sit next
    to the one token that tells a cheap request from a best-answer one (conductor/cost_dial.py)."""
    return f"{SETTING_PREFIX}{setting}.\n"


def kind_plan(kind: str) -> str:
    """A plan line that names the kind of question, its training domain (``sft.plan: kind``). The label is
    the data's, not a preference: every kind gets the same uniform workers, so the warm start learns to name
    what it reads and GRPO can learn a worker per kind, a few tokens later, without one kind's reward moving
    another's. Held-out and unseen questions come with no label: the policy writes the kind it reads."""
    if not kind.strip() or "=" in kind or "\n" in kind:
        raise ValueError(f"a kind plan names a domain in one line without '=': got {kind!r}")
    return f"{KIND_PREFIX}{kind.strip()}.\n"


def example_plans(plan: str, words: int, questions: Sequence[str],
                  settings: Optional[Sequence[Optional[int]]] = None,
                  kinds: Optional[Sequence[str]] = None) -> Optional[list[str]]:
    """Each question's plan line for the warm start's examples (``sft.plan``, ``sft.plan_words``), or None
    for examples without one. ``settings``: a cost-dial run's setting of each question (``plan: setting``);
    ``kinds``: each question's domain (``plan: kind``)."""
    if plan == "none":
        return None
    if plan == "restate":
        return [restating_plan(question, words) for question in questions]
    if plan == "kind":
        if kinds is None or len(kinds) != len(questions):
            raise ValueError("sft.plan: kind names each question's domain: it needs one per question")
        return [kind_plan(kind) for kind in kinds]
    if plan == "setting":
        if settings is None or len(settings) != len(questions) or any(s is None for s in settings):
            raise ValueError("sft.plan: setting states each prompt's cost-dial setting: it needs a dial run "
                             "(reward.cost_weight_range)")
        return [setting_plan(setting) for setting in settings]
    raise ValueError(f"unknown plan {plan!r}; known: none, restate, setting, kind")
