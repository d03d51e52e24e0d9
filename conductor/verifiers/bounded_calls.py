"""Calls of one user function, bounded in time and in threads: each call runs on a daemon thread of its
own and is waited for at most ``timeout_s``; at most ``threads`` such threads live at once.

Python cannot kill a thread, so a call past its timeout is abandoned, not stopped: its thread runs on until
the function returns, its result is dropped, and it keeps its slot until then. A function that hangs for
good therefore holds one slot for good, never more, and never a thread of the caller's (the scorer's
threads are back after ``timeout_s``). Once every slot is held, a new call waits ``timeout_s`` for one and
then fails with ``Saturated``, which names how many of them are past their timeout. The threads are daemons,
so a hung call does not keep the process from exiting."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


class CallTimeout(Exception):
    """The call did not return within its time; it goes on in the background, its result dropped."""


class Saturated(Exception):
    """Every thread is busy and none came free in time: the function's calls hang or come too fast."""


class _Call:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None
        self.overdue = False  # abandoned by its caller; counted in BoundedCalls.overdue until it returns


class BoundedCalls:
    def __init__(self, threads: int, name: str = "bounded-call"):
        if threads < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        self.threads = threads
        self.name = name
        self.overdue = 0  # calls past their timeout whose thread still runs
        self._slots = threading.BoundedSemaphore(threads)
        self._lock = threading.Lock()

    def call(self, function: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        """``function(*args)``'s value, or what it raised; ``CallTimeout`` after ``timeout_s``, ``Saturated``
        when no thread came free within ``timeout_s``."""
        if not self._slots.acquire(timeout=timeout_s):
            raise Saturated(f"all {self.threads} threads busy for {timeout_s:g} s ({self.overdue} of them in calls "
                            "past the timeout)")
        call = _Call()
        try:
            threading.Thread(target=self._run, args=(call, function, args), name=self.name, daemon=True).start()
        except BaseException:
            self._slots.release()
            raise
        if not call.done.wait(timeout_s):
            with self._lock:
                if not call.done.is_set():  # else it returned just now: take its result after all
                    call.overdue = True
                    self.overdue += 1
            if call.overdue:
                raise CallTimeout(f"no result within {timeout_s:g} s")
        if call.error is not None:
            raise call.error
        return call.value

    def _run(self, call: _Call, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            call.value = function(*args)
        except BaseException as exc:  # handed to the caller, who decides what the user's error means
            call.error = exc
        finally:
            with self._lock:
                call.done.set()
                if call.overdue:
                    self.overdue -= 1
            self._slots.release()
