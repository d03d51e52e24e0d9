"""One `make train`-equivalent run (`cluster.train` on `configs/train-toy.yaml`) in a subprocess with its own
Ray cluster, for the benchmarks that compare whole runs: what it wrote (summary.json, the final
checkpoint's step history) and its wall time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def train_run(name: str, overrides: list[str], workdir: Path, config: str = "configs/train-toy.yaml",
              warm_from: Path | None = None) -> dict:
    """``warm_from``: an earlier run's SFT warm start to begin from (the driver reuses ``runs/<run>/sft``),
    so runs that compare settings start from the same weights and skip repeating it."""
    if warm_from is not None:
        shutil.copytree(warm_from, workdir / "runs" / name / "sft", dirs_exist_ok=True)
    args = [sys.executable, "-m", "cluster.train", "--config", str(REPO / config), "--set", f"run_name={name}"]
    for override in overrides:
        args += ["--set", override]
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    started = time.time()
    done = subprocess.run(args, cwd=workdir, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"run {name} failed:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    run = workdir / "runs" / name
    summary, history = read_run(run)
    return {"run": run, "summary": summary, "history": history, "wall_s": time.time() - started}


def read_run(run: Path) -> tuple[dict, list[dict]]:
    """A finished run's summary.json and the per-step history of its final checkpoint."""
    summary = json.loads((run / "summary.json").read_text())
    tag = json.loads((run / "checkpoints" / "latest.json").read_text())["tag"]
    history = json.loads((run / "checkpoints" / tag / "trainer_state.json").read_text())["history"]
    return summary, history
