"""The trainer's own state, its checkpoints and the run directory's audit log. The learners checkpoint
model, optimizer, scheduler and their RNG through DeepSpeed; this adds everything the driver needs to
continue exactly.

Layout under ``runs/<run>/checkpoints/``: one directory per tag (``step-N``, ``best``) holding the
DeepSpeed files plus ``trainer_state.json``; ``latest.json`` names the newest complete ``step-N`` and is
written last (atomically), so a run killed mid-save resumes from the previous checkpoint.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

from rich.console import Console


@dataclass
class TrainState:
    step: int = 0
    version: int = 0                                   # the engines' policy version
    sampler: dict[str, int] = field(default_factory=lambda: {"epoch": 0, "position": 0})
    store_cursor: str = "[]"                           # ReplayStore Cursor JSON
    history: list[dict[str, Any]] = field(default_factory=list)   # one row per step
    evals: list[dict[str, Any]] = field(default_factory=list)     # validation results
    best_val: float = -1.0
    best_step: int = -1
    low_format_steps: int = 0
    rollbacks: int = 0
    wall_seconds: float = 0.0                          # summed over resumed segments
    faults: dict[str, int] = field(default_factory=dict)  # restarts by actor kind, re-issued requests, ...

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrainState:
        data = json.loads(text)
        data.pop("rng", None)  # written by earlier versions; the driver keeps no RNG of its own
        return cls(**data)


class Checkpoints:
    def __init__(self, root: Path, keep: int):
        self.root, self.keep = Path(root), keep
        self.root.mkdir(parents=True, exist_ok=True)

    def save(self, learners: Any, state: TrainState, tag: str) -> Path:
        learners.save_checkpoint(str(self.root), tag, {"policy_version": state.version, "step": state.step})
        (self.root / tag / "trainer_state.json").write_text(state.to_json())
        if tag.startswith("step-"):
            _write_atomic(self.root / "latest.json", json.dumps({"tag": tag}))
            self._prune()
        return self.root / tag

    def latest(self) -> Optional[str]:
        marker = self.root / "latest.json"
        return json.loads(marker.read_text())["tag"] if marker.exists() else None

    def load(self, learners: Any, tag: str) -> TrainState:
        """Restore the learners' model, optimizer, scheduler and RNG; return the driver's state then."""
        learners.load_checkpoint(str(self.root), tag)
        return TrainState.from_json((self.root / tag / "trainer_state.json").read_text())

    def _prune(self) -> None:
        steps = sorted((p for p in self.root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name[5:]))
        for old in steps[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)


def append_trained(path: Path, step: int, learner_version: int, groups: list) -> None:
    """One line per step in ``trained_groups.jsonl``: the groups trained, their rollout ids and the
    versions that sampled them (for audits and tests)."""
    line = {"step": step, "learner_version": learner_version,
            "groups": {group[0].group_id: {"version": group[0].policy_version,
                                           "rollout_ids": sorted(r.rollout_id for r in group)}
                       for group in groups}}
    with open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def trim_trained_log(path: Path, last_step: int) -> None:
    """On resume: the steps after the checkpoint are trained again, so their old lines go."""
    if path.exists():
        lines = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= last_step]
        path.write_text("".join(line + "\n" for line in lines))


def archive_previous_run(run_dir: Path, console: Console) -> None:
    """A fresh run in a directory a previous run used: its checkpoints and audit log move aside (a
    rollback must never load another run's weights); the warm start and the store stay (reused)."""
    old = [run_dir / name for name in ("checkpoints", "trained_groups.jsonl") if (run_dir / name).exists()]
    if old:
        target = run_dir / "previous" / time.strftime("%Y%m%d-%H%M%S")
        target.mkdir(parents=True, exist_ok=True)
        for path in old:
            path.rename(target / path.name)
        console.print(f"a previous run's checkpoints moved to {target} (resume with --set train.resume=true)")
