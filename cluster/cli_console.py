"""The one console every command line prints through.

In a pipe (a job log, CI, a test's subprocess) rich would wrap at 80 columns and split long paths across
lines, so whatever reads the log could not find them. There the console is wide and never wraps a line;
tables still fit its width. In a terminal it is rich's usual console.
"""
from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console

from conductor.stop_request import StopRequest, StopSignal

PIPE_WIDTH = 200


def cli_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)


def run_command(name: str, run: Callable[[Any, Console, str], Any], config: Any,
                argv: Sequence[str] | None) -> int:
    """``python -m cluster.<name>``'s run with the command line it was given (for its outputs to record);
    a ValueError (a bad setting found while running) is one red line on stderr and exit code 2. SIGTERM
    (``ray job stop``) or Ctrl-C unwinds it at once (conductor/stop_request.py), so the pool's ``finally``
    stores the answers already paid for in ``pool.cache``: exit code 128 + the signal's number."""
    command = f"python -m cluster.{name} " + shlex.join(sys.argv[1:] if argv is None else argv)
    stop = StopRequest()
    try:
        with stop.interrupting():
            run(config, cli_console(), command)
    except ValueError as exc:
        cli_console(stderr=True).print(f"[red]{name}: {exc}[/]")
        return 2
    except StopSignal as signalled:
        cli_console(stderr=True).print(f"[yellow]{name}: {signalled.signal.name}: stopped[/]")
        return stop.exit_code
    return 0
