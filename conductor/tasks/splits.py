"""Disjoint train / validation / held-out splits, and the training sampler with a resumable cursor.

Validation picks the checkpoint to keep; held-out is scored once, at the end, so the reported number
was not selected on. The sampler walks seeded per-epoch permutations of the training split; its state
(epoch, position) is plain data in the trainer's checkpoint, so a resumed run sees the same questions.

With domain weights (``train.domain_weights``, as OpenRLHF's ``prompt_data_probs``) draw ``k`` comes from
domain ``d`` with probability ``w_d / sum(w)``, chosen by a generator seeded with ``(seed, k)``, and each
domain walks its own permutations: a small domain (HumanEval's 164 items beside 1,100 others) is seen as
often as its weight says, not as its size says, and the state stays plain data.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Union

from conductor.tasks.task import Task

if TYPE_CHECKING:
    from conductor.config import TrainConfig


@dataclass(frozen=True)
class TaskSplits:
    train: tuple[Task, ...]
    val: tuple[Task, ...]
    heldout: tuple[Task, ...]


def split_tasks(tasks: Sequence[Task], val: int, heldout: int, seed: int) -> TaskSplits:
    if len(tasks) < val + heldout + 1:
        raise ValueError(f"{len(tasks)} tasks cannot give {heldout} held-out + {val} validation + training ones")
    order = list(tasks)
    random.Random(f"splits:{seed}").shuffle(order)
    return TaskSplits(train=tuple(order[val + heldout:]), val=tuple(order[heldout:heldout + val]),
                      heldout=tuple(order[:heldout]))


def configured_splits(tasks: Sequence[Task], train: TrainConfig) -> TaskSplits:
    """The splits a run trains, validates and is evaluated on: ``train.split_seed``, not the run's ``seed``,
    draws them, so runs over seeds are compared on the same questions."""
    return split_tasks(tasks, train.val_questions, train.heldout_questions, train.split_seed)


class TaskSampler:
    """One seeded permutation per epoch over ``tasks``; ``next`` continues where the last call stopped."""

    def __init__(self, tasks: Sequence[Task], seed: int | str, epoch: int = 0, position: int = 0):
        self.tasks, self.seed, self.epoch, self.position = list(tasks), seed, epoch, position

    def _order(self) -> list[int]:
        order = list(range(len(self.tasks)))
        random.Random(f"sampler:{self.seed}:{self.epoch}").shuffle(order)
        return order

    def next(self, count: int) -> list[Task]:
        batch = []
        while len(batch) < count:
            order = self._order()
            take = order[self.position:self.position + count - len(batch)]
            batch += [self.tasks[i] for i in take]
            self.position += len(take)
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
        return batch

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position}


class DomainWeightedSampler:
    """Draws each question's domain by weight, then the next question of that domain's own sampler."""

    def __init__(self, tasks: Sequence[Task], seed: int, weights: Mapping[str, float], draws: int = 0,
                 domains: Optional[Mapping[str, dict[str, int]]] = None):
        present = sorted({task.domain for task in tasks})
        unknown = sorted(set(weights) - set(present))
        missing = [domain for domain in present if domain not in weights]
        if unknown or missing:
            raise ValueError(f"train.domain_weights must give every training domain a weight (0 leaves one out): "
                             f"the split has {present}; unknown {unknown}, missing {missing}")
        self.domains = [domain for domain in present if weights[domain] > 0]
        if not self.domains:
            raise ValueError("train.domain_weights: every weight is 0; no question could be drawn")
        self.weights = [float(weights[domain]) for domain in self.domains]
        self.seed, self.draws = seed, draws
        cursors = domains or {}
        self.samplers = {domain: TaskSampler([task for task in tasks if task.domain == domain],
                                             f"{seed}:{domain}", **cursors.get(domain, {}))
                         for domain in self.domains}

    def next(self, count: int) -> list[Task]:
        batch = []
        for _ in range(count):
            domain = random.Random(f"domain:{self.seed}:{self.draws}").choices(self.domains, self.weights)[0]
            batch += self.samplers[domain].next(1)
            self.draws += 1
        return batch

    def state(self) -> dict[str, Any]:
        return {"draws": self.draws, "domains": {domain: sampler.state() for domain, sampler in self.samplers.items()}}


class RequeuingSampler:
    """A sampler resumed from a checkpoint that first draws again the questions drawn before it but not yet
    trained (``requeued``, in draw order: async training admits up to k·Q questions ahead of the step it
    trains), then continues the sampler it wraps. Its state names those still to draw again."""

    def __init__(self, inner: Union[TaskSampler, DomainWeightedSampler], tasks: Sequence[Task],
                 requeued: Sequence[str]):
        by_id = {task.id: task for task in tasks}
        self.inner, self.requeued = inner, [by_id[task_id] for task_id in requeued if task_id in by_id]

    def next(self, count: int) -> list[Task]:
        batch, self.requeued = self.requeued[:count], self.requeued[count:]
        return batch + (self.inner.next(count - len(batch)) if count > len(batch) else [])

    def state(self) -> dict[str, Any]:
        return with_requeued(self.inner.state(), [task.id for task in self.requeued])


QuestionSampler = Union[TaskSampler, DomainWeightedSampler, RequeuingSampler]


def with_requeued(state: Mapping[str, Any], task_ids: Sequence[str]) -> dict[str, Any]:
    """``state`` that also names questions to draw again first (after any it already names)."""
    requeued = [*task_ids, *state.get("requeue", [])]
    return {**{key: value for key, value in state.items() if key != "requeue"},
            **({"requeue": requeued} if requeued else {})}


def training_sampler(tasks: Sequence[Task], seed: int, weights: Optional[Mapping[str, float]],
                     state: Mapping[str, Any]) -> QuestionSampler:
    """The sampler ``train.domain_weights`` asks for, continued from a checkpoint's ``state`` (empty: fresh),
    drawing first the questions the state requeues. A state written under the other kind of sampler raises:
    the run's question stream would change."""
    weighted = weights is not None
    cursor = {key: value for key, value in state.items() if key != "requeue"}
    if cursor and ("draws" in cursor) != weighted:
        raise ValueError("train.domain_weights changed since this run's checkpoint; resume with the setting it "
                         "was trained with, or start a new run")
    inner = DomainWeightedSampler(tasks, seed, weights, **cursor) if weighted else TaskSampler(tasks, seed, **cursor)
    return RequeuingSampler(inner, tasks, state["requeue"]) if state.get("requeue") else inner
