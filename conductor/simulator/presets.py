"""Simulated worker line-ups and the task sets they know, read from a preset YAML file.

``toy`` and ``paper-7`` ship as conductor/simulator/presets_yaml/*.yaml (their comments say what each is);
``simulator.preset`` may also be the path of a user's own file. conductor/simulator/preset_file.py holds the
schema; this module turns a file into the ``SimPreset`` the simulator, oracle and pool config read.
``paper-7``'s unseen task types (``SimPreset.unseen``) are described in conductor/simulator/unseen.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conductor.config import PoolConfig, ProviderSpec, SimulatorConfig, WorkerSpec
from conductor.simulator.preset_file import PresetFile, TaskSource, read_preset_file
from conductor.simulator.unseen import UNSEEN_SUBJECTS, unseen_accuracy, unseen_tasks
from conductor.tasks.formats import preset_tasks
from conductor.tasks.loader import load_tasks, read_rows
from conductor.tasks.task import Task
from conductor.tasks.toy import toy_tasks


@dataclass(frozen=True)
class SimWorker:
    name: str
    description: str
    accuracy: dict[str, float]  # per task domain
    latency_ms: float = 50.0
    latency_sigma: float = 0.5
    price_in_per_m: float = 0.0
    price_out_per_m: float = 0.0
    answer_tokens: int = 0  # visible working before the final answer (padding; later steps read it)
    reasoning_tokens: int = 0  # hidden reasoning, billed as completion tokens and never shown


@dataclass(frozen=True)
class SimPreset:
    name: str
    workers: tuple[SimWorker, ...]
    tasks: tuple[Task, ...] = field(repr=False)
    error_correlation: dict[str, float] = field(default_factory=dict)  # per domain; 0.5 where not named
    unseen: tuple[Task, ...] = field(default=(), repr=False)  # known and calibrated, never trained on


def paper7_tasks(data_dir: str, mmlu_items: int, seed: int) -> tuple[Task, ...]:
    """The first ``mmlu_items`` MMLU rows outside the unseen subjects (ids keep their row index); for
    ``mmlu_items`` <= 1,333 that filter is a no-op, as every unseen subject lies further down the file."""
    root = Path(data_dir)
    mmlu = [t for t in preset_tasks(read_rows(str(root / "mmlu_stem.jsonl")), "mmlu", seed)
            if t.meta["subject"] not in UNSEEN_SUBJECTS][:mmlu_items]
    return tuple(preset_tasks(read_rows(str(root / "math500.jsonl")), "math500", seed)
                 + mmlu + preset_tasks(read_rows(str(root / "humaneval.jsonl.gz")), "humaneval", seed))


def _task_set(source: TaskSource, config: SimulatorConfig) -> tuple[Task, ...]:
    if source.builtin == "toy":
        return tuple(toy_tasks(config.toy_items_per_domain, config.seed))
    if source.builtin == "paper-7":
        return paper7_tasks(config.data_dir, config.mmlu_items, config.seed)
    if source.builtin == "paper-7-unseen":
        return unseen_tasks(config.data_dir, config.seed)
    return tuple(task for spec in source.datasets for task in load_tasks(spec))


def preset_workers(spec: PresetFile) -> tuple[SimWorker, ...]:
    """The file's workers, with the accuracies its ``unseen_accuracy`` rule derives added after the rest."""
    seen = {w.name: w.fractions() for w in spec.workers}
    derived = unseen_accuracy(seen) if spec.unseen_accuracy == "paper7_table2" else {}
    return tuple(SimWorker(w.name, w.description, seen[w.name] | derived.get(w.name, {}), w.latency_ms,
                           w.latency_sigma, w.price_in_per_m, w.price_out_per_m, w.answer_tokens, w.reasoning_tokens)
                 for w in spec.workers)


def load_preset(config: SimulatorConfig) -> SimPreset:
    spec = read_preset_file(config.preset)
    workers = preset_workers(spec)
    tasks = _task_set(spec.tasks, config)
    unseen = _task_set(spec.unseen, config) if spec.unseen else ()
    for domain in sorted({t.domain for t in tasks + unseen}):  # an uncalibrated domain would score 0 unseen
        missing = [w.name for w in workers if domain not in w.accuracy]
        if missing:
            raise ValueError(f"simulator.preset {config.preset}: no accuracy for domain {domain!r} "
                             f"in worker(s) {', '.join(missing)}")
    return SimPreset(spec.name, workers, tasks, dict(spec.error_correlation), unseen)


def simulated_pool_config(preset: SimPreset, base_url: str, **provider_limits: object) -> PoolConfig:
    """The pool spec that calls ``preset``'s workers on a simulator at ``base_url`` (one provider)."""
    provider = ProviderSpec(id="sim", base_url=base_url, **provider_limits)
    workers = [WorkerSpec(id=w.name, description=w.description, provider="sim", price_in_per_m=w.price_in_per_m,
                          price_out_per_m=w.price_out_per_m) for w in preset.workers]
    return PoolConfig(providers=[provider], workers=workers)
