"""Specs by name, the built-in ones declared as ``SPECS`` in modules imported on the first lookup.

The verifier kinds (conductor/verifiers/registry.py) and the evaluation methods
(conductor/evaluation/registry.py) register this way: a built-in module imports its registry for the spec
class, so the registry must not import it at load time; lazy loading keeps both free of import circles.
The first lookups may race (verify() runs in threads), hence the lock.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from importlib import import_module
from typing import Generic, Optional, Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


S = TypeVar("S", bound=Named)


class LazyRegistry(Generic[S]):
    def __init__(self, what: str, modules: Sequence[str], check: Optional[Callable[[S], None]] = None):
        self.what, self.modules, self._check = what, tuple(modules), check
        self.specs: dict[str, S] = {}
        self._lock = threading.RLock()
        self._loaded = False

    def all(self) -> dict[str, S]:
        """Every spec, the built-ins first in their modules' order, then plug-ins as registered."""
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    builtins: dict[str, S] = {}
                    for module in self.modules:
                        for spec in import_module(module).SPECS:
                            self._add(builtins, spec)
                    self.specs.update(builtins)
                    self._loaded = True
        return self.specs

    def _add(self, specs: dict[str, S], spec: S) -> None:
        if spec.name in specs:
            raise ValueError(f"{self.what} {spec.name!r} is registered twice")
        if self._check:
            self._check(spec)
        specs[spec.name] = spec

    def register(self, spec: S) -> S:
        """Add a spec beside the built-in ones (a name already taken is refused)."""
        with self._lock:
            self._add(self.all(), spec)
        return spec

    def names(self) -> tuple[str, ...]:
        return tuple(self.all())

    def find(self, name: str) -> Optional[S]:
        return self.all().get(name)
