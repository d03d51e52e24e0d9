"""Values made once per key in this process: a reward server's HTTP client, a user's imported reward
function, its bounded threads. The scorer calls from many threads at once, so each value is made under a
lock and only once; nothing is pickled, so a Ray actor makes its own at its first use."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class PerProcess(Generic[K, V]):
    def __init__(self) -> None:
        self._values: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K, make: Callable[[], V]) -> V:
        """The value for ``key``, made by ``make()`` the first time (a ``make`` that raises stores nothing)."""
        value = self._values.get(key)
        if value is None:
            with self._lock:
                value = self._values.get(key)
                if value is None:
                    value = self._values[key] = make()
        return value

    def __getitem__(self, key: K) -> V:
        return self._values[key]
