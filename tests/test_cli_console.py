"""Command lines print whole lines in a pipe, so a log reader finds a long path in one piece."""
from __future__ import annotations

import subprocess
import sys


def test_a_long_path_prints_on_one_line_in_a_pipe():
    path = "/tmp/" + "/".join(f"segment-{i:02d}" for i in range(30)) + "/rollouts"
    code = ("from cluster.cli_console import cli_console\n"
            f"cli_console().print('summary: {path}/summary.json, rollouts: {path}')\n"
            f"cli_console(stderr=True).print('[red]evaluate: no file {path}[/]')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "80", "TERM": "dumb", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert f"rollouts: {path}\n" in done.stdout
    assert done.stdout.count("\n") == 1
    assert done.stderr == f"evaluate: no file {path}\n"
