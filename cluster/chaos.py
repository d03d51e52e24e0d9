"""Chaos for tests and demos: kill a random actor of the next configured kind every ``every_s`` seconds,
or after every ``every_steps`` training steps (the driver reports each step through ``on_step``).

Kinds: ``rollout_actor``, ``engine``, ``pool`` (restarted by Ray: ``max_restarts``) and ``learner`` (a
DeepSpeed rank cannot rejoin its group; the driver rebuilds the group from the newest checkpoint). The
monkey runs in a daemon thread of the driver and only calls ``ray.kill``; everything that follows is
the system's own recovery.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from typing import Any, Optional

import ray

from conductor.config import ChaosConfig

RESTARTED_BY_RAY = {"rollout_actor", "engine", "pool"}


class ChaosMonkey:
    def __init__(self, config: ChaosConfig, targets: dict[str, Callable[[], list[Any]]],
                 log: Optional[Callable[[str], None]] = None):
        self.config, self.targets, self.log = config, targets, log or (lambda message: None)
        self.kills: list[tuple[str, int]] = []  # (kind, index), in order
        self.rng = random.Random(config.seed)
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    @property
    def limit(self) -> int:
        return self.config.max_kills or len(self.config.kill)

    def start(self) -> ChaosMonkey:
        if self.config.kill and self.config.every_steps is None:
            self.thread.start()
        return self

    def on_step(self, step: int) -> None:
        """A training step finished: on a step schedule, kill the next kind when it is due."""
        every = self.config.every_steps
        if self.config.kill and every is not None and step % every == 0 and len(self.kills) < self.limit:
            self.kill_one(self.config.kill[len(self.kills) % len(self.config.kill)])

    def stop(self) -> None:
        self.stopped.set()

    def _run(self) -> None:
        if self.stopped.wait(self.config.first_after_s):
            return
        while len(self.kills) < self.limit and not self.stopped.wait(self.config.every_s):
            kind = self.config.kill[len(self.kills) % len(self.config.kill)]
            self.kill_one(kind)

    def kill_one(self, kind: str) -> Optional[int]:
        handles = self.targets[kind]()
        if not handles:
            return None
        index = self.rng.randrange(len(handles))
        try:
            ray.kill(handles[index], no_restart=kind not in RESTARTED_BY_RAY)
        except Exception as exc:  # an actor already gone: nothing to kill, note it and go on
            self.log(f"chaos: could not kill {kind} {index}: {type(exc).__name__}")
            return None
        self.kills.append((kind, index))
        self.log(f"[magenta]chaos: killed {kind} {index}[/]")
        return index
