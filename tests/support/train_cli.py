"""`python -m cluster.train` as a user runs it, in a subprocess: the slow driver tests' one way to start it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run_train(cwd: Path | str, config: Path | str, overrides: Sequence[str], *, timeout: float = 900,
              wrapper: Sequence[str] = ()) -> subprocess.CompletedProcess:
    """Run the driver in ``cwd`` (its runs/ land there) with ``--set`` for each override. ``wrapper``: module
    arguments that run before it, e.g. ("-m", "tests.support.without_user_namespaces")."""
    return subprocess.run(_command(config, overrides, wrapper), cwd=cwd, env=_environment(), capture_output=True,
                          text=True, timeout=timeout)


def start_train(cwd: Path | str, config: Path | str, overrides: Sequence[str], stderr: Path) -> subprocess.Popen:
    """The driver started, its log read line by line as it is written (``stdout``); its stderr, where Ray's and
    vLLM's logs go, into the file ``stderr`` (a pipe nobody reads would fill and stall it)."""
    with open(stderr, "w") as errors:
        return subprocess.Popen(_command(config, overrides, ()), cwd=cwd, stdout=subprocess.PIPE, stderr=errors,
                                env=dict(_environment(), PYTHONUNBUFFERED="1"), text=True)


def _command(config: Path | str, overrides: Sequence[str], wrapper: Sequence[str]) -> list[str]:
    args = [sys.executable, *wrapper, "-m", "cluster.train", "--config", str(config)]
    for override in overrides:
        args += ["--set", override]
    return args


def _environment() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
