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
    args = [sys.executable, *wrapper, "-m", "cluster.train", "--config", str(config)]
    for override in overrides:
        args += ["--set", override]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
