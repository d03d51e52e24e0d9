"""The trainer's own state, its checkpoints and the run directory's audit log. The learners checkpoint
model, optimizer, scheduler and their RNG through DeepSpeed; this adds everything the driver needs to
continue exactly.

Layout under ``<output>/<run>/checkpoints/`` (a local dir or S3: conductor/run_output.py): one directory
per tag (``step-N``, ``best``) holding the DeepSpeed files every rank uploads plus ``trainer_state.json``;
``latest.json`` names the newest complete ``step-N`` and is written last (whole), so a run killed
mid-save resumes from the previous checkpoint.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from rich.console import Console

from conductor.run_output import RunOutput
from conductor.spend_meter import LEDGER


@dataclass
class TrainState:
    step: int = 0
    version: int = 0                                   # the engines' policy version
    sampler: dict[str, Any] = field(default_factory=dict)  # the training sampler's cursor (empty: fresh)
    store_cursor: str = "[]"                           # ReplayStore Cursor JSON
    pending: dict[str, Any] = field(default_factory=dict)  # groups admitted, not trained (cluster/pending_groups.py)
    history: list[dict[str, Any]] = field(default_factory=list)   # one row per step
    evals: list[dict[str, Any]] = field(default_factory=list)     # validation results
    best_val: float = -1.0
    best_step: int = -1
    best_basis: str = ""                               # what best_val measures (cluster/best_checkpoint.py)
    low_format_steps: int = 0
    rollbacks: int = 0
    wall_seconds: float = 0.0                          # summed over resumed segments
    faults: dict[str, int] = field(default_factory=dict)  # restarts by actor kind, re-issued requests, ...
    token_multiplier: Optional[float] = None           # the token budget's lambda (conductor/token_budget.py)

    def format_collapsed(self, format_rate: float, floor: float, patience: int) -> bool:
        """Counts consecutive steps whose sampled format rate is under ``floor``; True once there are
        ``patience`` of them. A collapsed format (all rewards 0, all advantages 0) never recovers."""
        self.low_format_steps = self.low_format_steps + 1 if format_rate < floor else 0
        return self.low_format_steps >= patience

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> TrainState:
        data = json.loads(text)
        data.pop("rng", None)  # written by earlier versions; the driver keeps no RNG of its own
        return cls(**data)


class Checkpoints:
    def __init__(self, out: RunOutput, keep: int):
        self.out, self.keep = out, keep

    def save(self, learners: Any, state: TrainState, tag: str) -> str:
        learners.save_checkpoint(self.out, tag, {"policy_version": state.version, "step": state.step})
        self.out.write_text("checkpoints", tag, "trainer_state.json", text=state.to_json())
        if tag.startswith("step-"):
            self.out.write_text("checkpoints", "latest.json", text=json.dumps({"tag": tag}))
            self._prune()
        return self.out.path("checkpoints", tag)

    def latest(self) -> Optional[str]:
        if not self.out.exists("checkpoints", "latest.json"):
            return None
        return json.loads(self.out.read_text("checkpoints", "latest.json"))["tag"]

    def load(self, learners: Any, tag: str) -> TrainState:
        """Restore the learners' model, optimizer, scheduler and RNG; return the driver's state then."""
        learners.load_checkpoint(self.out, tag)
        return TrainState.from_json(self.out.read_text("checkpoints", tag, "trainer_state.json"))

    def saved_step(self, tag: str) -> Optional[int]:
        """The step a checkpoint was saved at (None: no such checkpoint)."""
        if not self.out.exists("checkpoints", tag, "trainer_state.json"):
            return None
        return int(json.loads(self.out.read_text("checkpoints", tag, "trainer_state.json"))["step"])

    def _prune(self) -> None:
        steps = sorted((name for name in self.out.list_dirs("checkpoints") if name.startswith("step-")),
                       key=lambda name: int(name[5:]))
        for old in steps[:-self.keep]:
            self.out.remove("checkpoints", old)


TRAINED_LOG = "trained_groups.jsonl"


def append_trained(out: RunOutput, step: int, learner_version: int, groups: list) -> None:
    """One line per step in ``trained_groups.jsonl``: the groups trained, their rollout ids and the
    versions that sampled them (for audits and tests). Appended locally; ``publish_trained`` uploads it
    when the output is remote."""
    line = {"step": step, "learner_version": learner_version,
            "groups": {group[0].group_id: {"version": group[0].policy_version,
                                           "rollout_ids": sorted(r.rollout_id for r in group)}
                       for group in groups}}
    path = out.staged(TRAINED_LOG)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        handle.write(json.dumps(line) + "\n")


def publish_trained(out: RunOutput) -> None:
    if out.staged(TRAINED_LOG).exists():
        out.publish(TRAINED_LOG)


def resume_trained_log(out: RunOutput, last_step: int) -> None:
    """On resume: the log comes back (from a remote output) without the steps after the checkpoint,
    which are trained again."""
    if not out.exists(TRAINED_LOG):
        return
    path = out.fetch(TRAINED_LOG)
    lines = [line for line in path.read_text().splitlines() if json.loads(line)["step"] <= last_step]
    path.write_text("".join(line + "\n" for line in lines))
    out.publish(TRAINED_LOG)


def archive_previous_run(out: RunOutput, console: Console) -> None:
    """A fresh run where a previous run wrote: its checkpoints, audit log and spend ledger move aside (a
    rollback must never load another run's weights; its spend is not this run's); the warm start and the
    store stay (reused)."""
    old = [name for name in ("checkpoints", TRAINED_LOG, LEDGER) if out.exists(name)]
    if old:
        target = ("previous", time.strftime("%Y%m%d-%H%M%S"))
        for name in old:
            out.move((name,), (*target, name))
        console.print(f"a previous run's checkpoints moved to {out.path(*target)} "
                      "(resume with --set train.resume=true)")
