"""Gathers concurrent blocking calls into batches: many threads each ask for one item's result, and one
request serves up to ``size`` of them (a reward server scores a batch per POST:
conductor/verifiers/http_reward.py).

No thread of its own. The first caller to find no open batch opens one and leads it: it waits until the
batch holds ``size`` items or ``wait_s`` has passed, closes it, sends it on its own thread and hands each
caller its result. The others only wait for theirs. A batch that fills closes at once, and the next caller
opens the next one, so several batches can be in flight together, one per leader.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Generic, Optional, TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


class CallBatcher(Generic[Item, Result]):
    """``send(items)`` returns one result per item, in order. If it raises, or returns another number of
    results, every caller of that batch gets the exception."""

    def __init__(self, send: Callable[[Sequence[Item]], Sequence[Result]], size: int, wait_s: float):
        if size < 1 or wait_s < 0:
            raise ValueError(f"a batch needs size >= 1 and wait_s >= 0 (got {size}, {wait_s})")
        self.send, self.size, self.wait_s = send, size, wait_s
        self._changed = threading.Condition()
        self._open: Optional[list[tuple[Item, Future]]] = None

    def call(self, item: Item) -> Result:
        """This item's result, sent in a batch with whatever other calls arrive meanwhile."""
        result: Future = Future()
        with self._changed:
            leader = self._open is None
            if leader:
                self._open = []
            batch = self._open
            batch.append((item, result))
            if len(batch) >= self.size:
                self._open = None
                self._changed.notify_all()
            if leader:
                self._wait_until_closed(batch)
        if leader:
            self._send(batch)
        return result.result()

    def _wait_until_closed(self, batch: list) -> None:
        """Holding the lock: until a caller fills ``batch`` or ``wait_s`` has passed; then it is closed."""
        deadline = time.monotonic() + self.wait_s
        while self._open is batch:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._open = None
                return
            self._changed.wait(remaining)

    def _send(self, batch: list[tuple[Item, Future]]) -> None:
        try:
            results = list(self.send([item for item, _ in batch]))
            if len(results) != len(batch):
                raise RuntimeError(f"send returned {len(results)} results for {len(batch)} items")
        except BaseException as exc:  # every caller of the batch learns of it, not only the leader
            for _, future in batch:
                future.set_exception(exc)
            return
        for (_, future), value in zip(batch, results):
            future.set_result(value)
