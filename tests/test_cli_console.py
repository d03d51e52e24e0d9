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


def test_sigterm_unwinds_a_command_through_its_finally_and_exits_143():
    """As ``ray job stop`` stops an evaluation: the pool's ``finally`` (which stores the answers paid for in
    ``pool.cache``) runs, inside an event loop as the evaluation's does, where Python's default would end it."""
    code = ("import asyncio, os, signal, sys\n"
            "from cluster.cli_console import run_command\n"
            "def run(config, console, command):\n"
            "    async def work():\n"
            "        try:\n"
            "            os.kill(os.getpid(), signal.SIGTERM)\n"
            "            await asyncio.sleep(60)\n"
            "        finally:\n"
            "            print('the pool closed', flush=True)\n"
            "    asyncio.run(work())\n"
            "sys.exit(run_command('evaluate', run, None, []))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={"COLUMNS": "80", "TERM": "dumb", "PATH": "/usr/bin:/bin"})
    assert done.returncode == 143, done.stderr
    assert done.stdout == "the pool closed\n" and done.stderr == "evaluate: SIGTERM: stopped\n"
