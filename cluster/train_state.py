"""The trainer's own state and its checkpoints (the learners checkpoint model, optimizer, scheduler and
their RNG through DeepSpeed; this adds everything the driver needs to continue exactly).

Layout under ``runs/<run>/checkpoints/``: one directory per tag (``step-N``, ``best``) holding the
DeepSpeed files plus ``trainer_state.json``; ``latest.json`` names the newest complete ``step-N`` and is
written last (atomically), so a run killed mid-save resumes from the previous checkpoint.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional


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
    rng: Any = None                                    # the driver's random.Random state

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "TrainState":
        data = json.loads(text)
        if data.get("rng") is not None:
            data["rng"] = _tuples(data["rng"])
        return cls(**data)


def _tuples(value: Any) -> Any:
    """JSON turns random.getstate()'s tuples into lists; setstate needs them back."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


class Checkpoints:
    def __init__(self, root: Path, keep: int):
        self.root, self.keep = Path(root), keep
        self.root.mkdir(parents=True, exist_ok=True)

    def save(self, learners: Any, state: TrainState, tag: str, rng: random.Random) -> Path:
        state.rng = rng.getstate()
        learners.save_checkpoint(str(self.root), tag, {"policy_version": state.version, "step": state.step})
        (self.root / tag / "trainer_state.json").write_text(state.to_json())
        if tag.startswith("step-"):
            _write_atomic(self.root / "latest.json", json.dumps({"tag": tag}))
            self._prune()
        return self.root / tag

    def latest(self) -> Optional[str]:
        marker = self.root / "latest.json"
        return json.loads(marker.read_text())["tag"] if marker.exists() else None

    def load(self, learners: Any, tag: str, rng: random.Random) -> TrainState:
        learners.load_checkpoint(str(self.root), tag)
        state = TrainState.from_json((self.root / tag / "trainer_state.json").read_text())
        if state.rng is not None:
            rng.setstate(state.rng)
        return state

    def _prune(self) -> None:
        steps = sorted((p for p in self.root.glob("step-*") if p.is_dir()), key=lambda p: int(p.name[5:]))
        for old in steps[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def _write_atomic(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(text)
    os.replace(temporary, path)
