"""Disjoint train / validation / held-out splits, and the training sampler with a resumable cursor.

Validation picks the checkpoint to keep; held-out is scored once, at the end, so the reported number
was not selected on. The sampler walks seeded per-epoch permutations of the training split; its state
(epoch, position) is plain data in the trainer's checkpoint, so a resumed run sees the same questions.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from conductor.tasks.task import Task


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


class TaskSampler:
    def __init__(self, tasks: Sequence[Task], seed: int, epoch: int = 0, position: int = 0):
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
