"""A stop asked of a training run from outside: SIGTERM to the driver (``ray job stop``, a preemption notice; a
pod's termination only where the driver is the container's first process) or SIGINT (Ctrl-C).

The first signal only sets a flag: the run (cluster/grpo_recipe.py) lets the step it is training finish, saves
a checkpoint (its weights, the question sampler, the groups admitted for later steps: cluster/pending_groups.py),
lets those groups' requests come back so a resumed run trains them instead of paying for them again, and exits
with 128 + the signal's number, as a process killed by it would: a job system sees an unfinished run, and
``train.resume=true`` goes on from the checkpoint. A second signal is handled as it was before the first was
asked for (Ray's driver: stop its local cluster and exit), so a stop that takes too long can still be forced.

Install from the main thread (Python's rule for signal handlers), after ``ray.init``, which sets its own.
"""

from __future__ import annotations

import signal
from types import FrameType
from typing import Any, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequest:
    def __init__(self) -> None:
        self.signal: Optional[signal.Signals] = None
        self._previous: dict[signal.Signals, Any] = {}

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, the shell's code for a process ended by it (SIGTERM: 143)."""
        return 128 + int(self.signal) if self.signal is not None else 0

    def install(self) -> StopRequest:
        for sig in SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        sig = signal.Signals(signum)
        if self.signal is None:
            self.signal = sig
            return
        previous = self._previous.get(sig)  # the second: as before the first was asked for
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)
