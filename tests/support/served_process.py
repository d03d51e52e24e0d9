"""A server in a process of its own (the endpoint, the simulated workers), started the way the tests and
bench/serve_load.py start it: output to a log file, handed back once its health URL answers 200."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Optional

import httpx

REPO = Path(__file__).resolve().parents[2]


def start_process(command: list[str], log: Path, health_url: str, env: Optional[Mapping[str, str]] = None,
                  startup_s: float = 300) -> subprocess.Popen:
    """Run ``command`` from the repo root with the repo on PYTHONPATH; a process that exits or stays
    unhealthy for ``startup_s`` is stopped and reported with the end of its log."""
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, PYTHONPATH=str(REPO), **(env or {})))
    deadline = time.monotonic() + startup_s
    while True:
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            raise RuntimeError(f"{health_url} did not come up:\n" + log.read_text()[-3000:])
        try:
            if httpx.get(health_url, timeout=2).status_code == 200:
                return process
        except httpx.HTTPError:
            time.sleep(0.5)


def stop_process(process: subprocess.Popen, timeout_s: float = 60) -> None:
    """SIGTERM (the endpoint then stops its engine's process too), SIGKILL if it lingers."""
    process.terminate()
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
