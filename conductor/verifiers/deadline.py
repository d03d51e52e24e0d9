"""Run a module-level function in a persistent child process under a wall-clock deadline.

Why a process: verifiers such as math-verify time out with ``signal.alarm``, which only works in a
process's main thread, while rollouts verify from threads and async actors. In the child the call runs
on its main thread (so the library's own timeouts work); the host's deadline is the backstop, and a
child stuck past it is killed and replaced on the next call. The child is a plain
``python -m conductor.verifiers.deadline_child`` child (not multiprocessing), so it works whatever the
caller's ``__main__`` is (stdin, notebooks, Ray actors). Messages are length-prefixed pickles between
this process and its own child.
"""

from __future__ import annotations

import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Optional

_HEADER = struct.Struct("!I")


class DeadlineExceeded(TimeoutError):
    pass


class ChildCrashed(RuntimeError):
    pass


def write_message(stream, payload: Any) -> None:
    data = pickle.dumps(payload)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def read_exactly(stream, size: int, deadline: Optional[float] = None) -> bytes:
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([stream], [], [], left)[0]:
                raise DeadlineExceeded()
        chunk = stream.read1(remaining) if hasattr(stream, "read1") else stream.read(remaining)
        if not chunk:
            raise ChildCrashed("child closed its output")
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def read_message(stream, deadline: Optional[float] = None) -> Any:
    (size,) = _HEADER.unpack(read_exactly(stream, _HEADER.size, deadline))
    return pickle.loads(read_exactly(stream, size, deadline))


class DeadlineRunner:
    def __init__(self) -> None:
        self._process: Optional[subprocess.Popen] = None
        self._lock = threading.Lock()

    def _child(self) -> subprocess.Popen:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "conductor.verifiers.deadline_child"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        return self._process

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
        with self._lock:
            process = self._child()
            try:
                write_message(process.stdin, (fn.__module__, fn.__qualname__, args))
                status, value = read_message(process.stdout, time.monotonic() + timeout_s)
            except DeadlineExceeded:
                self._kill()
                raise DeadlineExceeded(f"{fn.__qualname__} exceeded {timeout_s:g}s") from None
            except (ChildCrashed, BrokenPipeError, OSError, EOFError, pickle.UnpicklingError) as exc:
                self._kill()
                raise ChildCrashed(f"verifier child died: {exc}") from None
        if status == "error":
            raise RuntimeError(value)
        return value

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def close(self) -> None:
        with self._lock:
            self._kill()
