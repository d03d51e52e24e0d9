import threading
import time

import pytest

from conductor.verifiers.deadline import DeadlineExceeded, DeadlineRunner
from tests.support.slow_functions import child_pid, raise_value_error, sleep_then_return


def test_stuck_call_is_killed_from_a_thread_and_the_runner_recovers():
    runner = DeadlineRunner()
    outcome = {}

    def in_thread():
        started = time.monotonic()
        try:
            runner.run(sleep_then_return, 60, "late", timeout_s=0.5)
        except DeadlineExceeded:
            outcome["elapsed"] = time.monotonic() - started

    first_pid = runner.run(child_pid, timeout_s=30)
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(30)
    assert outcome["elapsed"] < 3
    assert runner.run(sleep_then_return, 0, "fresh", timeout_s=30) == "fresh"
    assert runner.run(child_pid, timeout_s=30) != first_pid  # the stuck child was replaced
    runner.close()


def test_errors_in_the_child_come_back_as_errors():
    runner = DeadlineRunner()
    with pytest.raises(RuntimeError, match="ValueError: bad input"):
        runner.run(raise_value_error, timeout_s=30)
    assert runner.run(sleep_then_return, 0, 7, timeout_s=30) == 7
    runner.close()
