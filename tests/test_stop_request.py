"""The stop asked by a signal (conductor/stop_request.py): the first only sets the flag, the second goes to the
handler that was there before, and uninstalling puts that handler back. Signals are raised in this process,
in its main thread, as the driver's would arrive."""

import signal

import pytest

from conductor.stop_request import StopRequest


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
