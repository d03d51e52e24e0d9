"""A stop asked of a training run from outside: SIGTERM to the driver (``ray job stop``, a preemption notice; a
pod's termination only where the driver is the container's first process) or SIGINT (Ctrl-C).

The first signal only sets a flag: the run (cluster/grpo_recipe.py) lets the step it is training finish, saves
a checkpoint (its weights, the question sampler, the groups admitted for later steps: cluster/pending_groups.py),
lets those groups' requests come back so a resumed run trains them instead of paying for them again, and exits
with 128 + the signal's number, as a process killed by it would: a job system sees an unfinished run, and
``train.resume=true`` goes on from the checkpoint. A second signal is handled as it was before the first was
asked for (Ray's driver: stop its local cluster and exit), so a stop that takes too long can still be forced.

Before and after the loop there is no step to finish: the warm start's measured prior or menu, the held-out
baselines and the closing held-out evaluation are one long batch of paid calls each. There (``interrupting``,
cluster/train.py) the first signal raises ``StopSignal`` at once, which unwinds like Ctrl-C's KeyboardInterrupt
through the ``finally`` blocks and exit callbacks that count what the calls cost in the run's ledger and store
their cached answers (conductor/local_pool.py, cluster/grpo_recipe.py), instead of Python's default for SIGTERM
before ``ray.init``, which ends the process with neither, or Ray's after it, which exits 15.

A stretch that a raise must not cut in two (the ledger's write and the cache's flush as a measurement ends, a
model's save) runs under ``signals_held``: a first signal there raises when the stretch ends.

Install from the main thread (Python's rule for signal handlers), and again after ``ray.init``, which sets its
own for SIGTERM (a signal during ``ray.init`` itself meets Ray's: exit code 15).
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType
from typing import Any, Optional

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignal(KeyboardInterrupt):
    """A stop asked outside the loop: a KeyboardInterrupt, so asyncio and ``except Exception`` let it through.
    Where it lands inside a Ray call, Ray raises a plain KeyboardInterrupt in its place; ``interrupting`` turns
    that back into this, so callers catch StopSignal alone."""

    def __init__(self, sig: signal.Signals):
        super().__init__(sig.name)
        self.signal = sig


_holding = 0                        # depth of signals_held blocks in this process
_held: list[signal.Signals] = []    # a first signal that arrived in one, raised when the outermost ends


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """While inside, an interrupting StopRequest's first signal waits: its StopSignal is raised as the outermost
    block ends without an error of its own. A second signal still goes to the handler before (a forced stop)."""
    global _holding
    _holding += 1
    try:
        yield
    finally:
        _holding -= 1
        waiting = _held[:1] if _holding == 0 else []
        if _holding == 0:
            _held.clear()  # on an error too: the stop stays asked (``requested``), nothing is held over
    if waiting:
        raise StopSignal(waiting[0])


class StopRequest:
    def __init__(self) -> None:
        self.signal: Optional[signal.Signals] = None
        self._previous: dict[signal.Signals, Any] = {}
        self._raising = False

    @property
    def requested(self) -> bool:
        return self.signal is not None

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, the shell's code for a process ended by it (SIGTERM: 143)."""
        return 128 + int(self.signal) if self.signal is not None else 0

    def install(self) -> StopRequest:
        """Idempotent: installed again over itself, it keeps the handlers it found the first time."""
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            if previous != self._handle:
                self._previous[sig] = previous
        return self

    @contextlib.contextmanager
    def interrupting(self) -> Iterator[None]:
        """Installed while inside, where the first signal raises StopSignal at once; a stop asked already
        raises on entry. On the way out, as it was: uninstalled, or still installed where it was before."""
        if self.signal is not None:
            raise StopSignal(self.signal)
        installed = bool(self._previous)
        self.install()
        self._raising = True
        try:
            yield
        except KeyboardInterrupt as interrupt:
            if self.signal is None or isinstance(interrupt, StopSignal):
                raise
            raise StopSignal(self.signal) from interrupt  # what a Ray call made of the stop's raise
        finally:
            self._raising = False
            if not installed:
                self.uninstall()

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous if previous is not None else signal.SIG_DFL)
        self._previous.clear()

    def _handle(self, signum: int, frame: Optional[FrameType]) -> None:
        sig = signal.Signals(signum)
        if self.signal is None:
            self.signal = sig
            if self._raising and _holding:
                _held.append(sig)
            elif self._raising:
                raise StopSignal(sig)
            return
        previous = self._previous.get(sig)  # the second: as before the first was asked for
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)
