"""Counts actor restarts by kind: every restartable actor answers ``pid()``; a new process id behind the
same handle is a restart (several between two looks count once, so this is a lower bound)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import ray

GONE = (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError)


class RestartWatch:
    def __init__(self, targets: dict[str, Callable[[], list[Any]]]):
        self.targets = targets
        self.pids: dict[tuple[str, int], int] = {}

    def look(self, timeout_s: float = 5.0) -> dict[str, int]:
        """Ask every actor for its pid; returns the restarts since the previous look, by kind."""
        calls = {(kind, i): handle.pid.remote() for kind, handles in self.targets.items()
                 for i, handle in enumerate(handles())}
        if calls:
            ray.wait(list(calls.values()), num_returns=len(calls), timeout=timeout_s)
        fresh = {kind: 0 for kind in self.targets}
        for key, call in calls.items():
            pid = _answer(call)
            if pid is None:
                continue
            if key in self.pids and self.pids[key] != pid:
                fresh[key[0]] += 1
            self.pids[key] = pid
        return fresh


def _answer(call: Any) -> Optional[int]:
    try:
        return ray.get(call, timeout=0)
    except GONE:
        return None
