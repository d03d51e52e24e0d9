"""The one console every command line prints through.

In a pipe (a job log, CI, a test's subprocess) rich would wrap at 80 columns and split long paths across
lines, so whatever reads the log could not find them. There the console is wide and never wraps a line;
tables still fit its width. In a terminal it is rich's usual console.
"""
from __future__ import annotations

from rich.console import Console

PIPE_WIDTH = 200


def cli_console(stderr: bool = False) -> Console:
    console = Console(stderr=stderr)
    if console.is_terminal:
        return console
    return Console(stderr=stderr, width=PIPE_WIDTH, soft_wrap=True)
