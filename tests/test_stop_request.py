"""The stop asked by a signal (conductor/stop_request.py): the first only sets the flag, the second goes to the
handler that was there before, and uninstalling puts that handler back; before training, the first raises.
Signals are raised in this process, in its main thread, as the driver's would arrive."""

import asyncio
import signal

import pytest

from conductor.local_pool import quiet_stops
from conductor.stop_request import StopRequest, StopSignal, signals_held


@pytest.fixture
def earlier_handlers():
    """A recording handler for SIGTERM and SIGINT in place of pytest's own, restored afterwards."""
    calls: list[int] = []
    saved = {sig: signal.signal(sig, lambda signum, frame: calls.append(signum)) for sig in
             (signal.SIGTERM, signal.SIGINT)}
    yield calls
    for sig, handler in saved.items():
        signal.signal(sig, handler)


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_the_first_signal_asks_for_the_stop_and_the_second_goes_to_the_handler_before(earlier_handlers, sig, code):
    request = StopRequest().install()
    try:
        assert not request.requested and request.exit_code == 0
        signal.raise_signal(sig)
        assert request.requested and request.signal == sig and request.exit_code == code
        assert earlier_handlers == []  # the first is the run's to handle
        signal.raise_signal(sig)
        assert earlier_handlers == [sig] and request.signal == sig
    finally:
        request.uninstall()
    signal.raise_signal(sig)  # the earlier handler is back
    assert earlier_handlers == [sig, sig]


def test_a_second_signal_of_the_other_kind_also_goes_to_its_earlier_handler(earlier_handlers):
    request = StopRequest().install()
    try:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        assert request.signal == signal.SIGTERM and earlier_handlers == [signal.SIGINT]
    finally:
        request.uninstall()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_before_training_the_first_signal_raises_at_once_and_the_handler_before_is_back_after(earlier_handlers, sig):
    request = StopRequest()
    with pytest.raises(StopSignal) as raised:
        with request.interrupting():
            signal.raise_signal(sig)
            pytest.fail("the signal did not interrupt")
    assert raised.value.signal == sig and request.signal == sig and request.exit_code == 128 + sig
    assert isinstance(raised.value, KeyboardInterrupt)  # not caught by `except Exception` on its way out
    signal.raise_signal(sig)
    assert earlier_handlers == [sig]
    with pytest.raises(StopSignal):  # a stop asked already: the next phase does not start
        with request.interrupting():
            pytest.fail("entered after a stop was asked")


def test_inside_an_event_loop_the_raise_reaches_the_finally_of_the_work_it_stopped(earlier_handlers):
    """As in conductor/local_pool.py's on_local_pool: asyncio lets a KeyboardInterrupt through, then cancels the
    work, whose ``finally`` (the pool's spend and its cache's flush) still runs."""
    cleaned_up = []

    async def work():
        try:
            await asyncio.sleep(0.01)
            signal.raise_signal(signal.SIGTERM)
            await asyncio.sleep(30)
        finally:
            cleaned_up.append(True)

    with pytest.raises(StopSignal):
        with StopRequest().interrupting():
            asyncio.run(work())
    assert cleaned_up == [True]


def test_a_signal_in_a_held_stretch_raises_when_the_outermost_stretch_ends(earlier_handlers):
    """The ledger's write, the cache's flush, a model's save: not cut in two by the first signal."""
    request = StopRequest()
    finished = []
    with pytest.raises(StopSignal):
        with request.interrupting():
            with signals_held():
                with signals_held():
                    signal.raise_signal(signal.SIGTERM)
                    finished.append("inner")
                finished.append("outer")
            pytest.fail("the held signal was not raised")
    assert finished == ["inner", "outer"] and request.signal == signal.SIGTERM
    assert earlier_handlers == []


def test_a_held_stretch_that_fails_keeps_its_own_error_and_the_stop_stays_asked(earlier_handlers):
    request = StopRequest()
    with pytest.raises(OSError):
        with request.interrupting():
            with signals_held():
                signal.raise_signal(signal.SIGTERM)
                raise OSError("disk full")
    assert request.requested
    with signals_held():  # nothing is left held over for the next stretch
        pass


def test_a_second_signal_in_a_held_stretch_still_forces_the_stop(earlier_handlers):
    request = StopRequest()
    with pytest.raises(StopSignal):
        with request.interrupting():
            with signals_held():
                signal.raise_signal(signal.SIGTERM)
                signal.raise_signal(signal.SIGTERM)
                assert earlier_handlers == [signal.SIGTERM]  # the handler before: here, the recording one


def test_the_loops_error_handler_keeps_a_stopped_tasks_exception_quiet_and_reports_others():
    reported = []

    class Loop:
        def default_exception_handler(self, context):
            reported.append(context["message"])

    quiet_stops(Loop(), {"message": "Task exception was never retrieved", "exception": StopSignal(signal.SIGTERM)})
    quiet_stops(Loop(), {"message": "Task exception was never retrieved", "exception": KeyboardInterrupt()})
    quiet_stops(Loop(), {"message": "a real one", "exception": ValueError("x")})
    assert reported == ["a real one"]


def test_interrupting_inside_an_installed_request_forces_the_second_signal_and_leaves_it_installed(earlier_handlers):
    """The driver installs the request after ray.init and may interrupt inside it: a second signal goes to the
    handler before (not to the request itself, round and round), and the request stays installed after."""
    request = StopRequest().install()
    request.install()  # again: it keeps the handler it found the first time
    try:
        with pytest.raises(StopSignal):
            with request.interrupting():
                with signals_held():
                    signal.raise_signal(signal.SIGTERM)
                    signal.raise_signal(signal.SIGTERM)
                    assert earlier_handlers == [signal.SIGTERM]
        assert signal.getsignal(signal.SIGTERM) == request._handle
    finally:
        request.uninstall()
    signal.raise_signal(signal.SIGTERM)
    assert earlier_handlers == [signal.SIGTERM, signal.SIGTERM]


def test_a_keyboardinterrupt_made_of_the_stop_comes_out_as_the_stop_and_any_other_as_itself(earlier_handlers):
    """A Ray call the stop's raise landed in raises a plain KeyboardInterrupt in its place: still the stop."""
    request = StopRequest()
    with pytest.raises(KeyboardInterrupt) as plain:
        with request.interrupting():
            raise KeyboardInterrupt
    assert type(plain.value) is KeyboardInterrupt and not request.requested
    with pytest.raises(StopSignal) as stop:
        with request.interrupting():
            request.signal = signal.SIGTERM  # as the handler sets it, before Ray swallows its raise
            raise KeyboardInterrupt
    assert stop.value.signal == signal.SIGTERM
