"""The learner group, kept alive: when a rank dies, the keeper starts a new group (and its weight sync) and
loads the newest checkpoint into it, up to ``train.max_learner_restarts`` times; an action that met the
death runs once more on the new group. What new weights mean for the run (a new policy version; groups the
lost weights sampled are not trained) is the recipe's to say, in ``on_rebuilt``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from cluster.train_state import Checkpoints

T = TypeVar("T")


class LearnerKeeper:
    def __init__(self, start: Callable[[], tuple[Any, Any]], checkpoints: Checkpoints, max_restarts: int,
                 restarts: Callable[[], int], count: Callable[[str], None],
                 on_rebuilt: Callable[[Optional[str], Exception], None]):
        """``start``: a new learner group and its weight sync; ``restarts``: the run's restarts so far (its
        state's count, which a resumed run carries); ``on_rebuilt(tag, cause)``: after a rebuild, from
        checkpoint ``tag`` (None: the warm-start policy)."""
        self._start, self.checkpoints, self.max_restarts = start, checkpoints, max_restarts
        self._restarts, self._count, self._on_rebuilt = restarts, count, on_rebuilt
        self.group, self.sync = start()
        self.restore_tag: Optional[str] = None  # what a rebuilt group loads (default: the newest checkpoint)

    def rebuild(self, cause: Exception) -> None:
        if self._restarts() >= self.max_restarts:
            raise RuntimeError(f"the learner group failed {self._restarts() + 1} times; last: {cause}") from cause
        self._count("learner_restarts")
        with contextlib.suppress(Exception):
            self.group.shutdown()
        self.group, self.sync = self._start()
        tag = self.restore_tag or self.checkpoints.latest()
        if tag:
            self.checkpoints.load(self.group, tag)
        self._on_rebuilt(tag, cause)

    def run(self, action: Callable[[], T]) -> T:
        """``action()``; if a rank dies during it, rebuild (from ``restore_tag``) and run it once more. Only for
        actions that do not depend on weights the rebuild cannot restore."""
        from learner.learner_group import LearnerGroupFailed

        try:
            return action()
        except LearnerGroupFailed as exc:
            self.rebuild(exc)
            return action()

    def shutdown(self) -> None:
        self.group.shutdown()
