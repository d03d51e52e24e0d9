"""Module-level functions the deadline worker can import by name in tests."""

import os
import time


def sleep_then_return(seconds: float, value):
    time.sleep(seconds)
    return value


def child_pid() -> int:
    return os.getpid()


def raise_value_error():
    raise ValueError("bad input")
