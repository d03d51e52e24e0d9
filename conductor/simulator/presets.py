"""Simulated worker line-ups, their judge and the task sets they know, read from a preset YAML file.

``toy``, ``paper-7`` and ``toy-judged`` ship as conductor/simulator/presets_yaml/*.yaml (their comments say what
each is); ``simulator.preset`` may also be the path of a user's own file. conductor/simulator/preset_file.py holds the
schema; this module turns a file into the ``SimPreset`` the simulator, oracle and pool config read.
``paper-7``'s unseen task types (``SimPreset.unseen``) are described in conductor/simulator/unseen.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from conductor.config import PoolConfig, ProviderSpec, SimulatorConfig, WorkerSpec
from conductor.dataset_config import DatasetSpec
from conductor.simulator.preset_file import PresetFile, TaskSource, preset_datasets, read_preset_file
from conductor.simulator.unseen import unseen_accuracy
from conductor.simulator_config import SIMULATED_PROVIDER_ID
from conductor.tasks.loader import load_tasks
from conductor.tasks.open_ended import open_ended_entry
from conductor.tasks.task import Task
from conductor.tasks.toy import toy_tasks
from conductor.verifiers import registry


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
class SimJudge:
    """The simulated judge (conductor/simulator/judge.py): grades judged tasks, never routed to."""

    name: str
    description: str
    error_rate: float = 0.05
    unparseable_rate: float = 0.0
    latency_ms: float = 50.0
    latency_sigma: float = 0.5
    price_in_per_m: float = 0.0
    price_out_per_m: float = 0.0


@dataclass(frozen=True)
class SimPreset:
    name: str
    workers: tuple[SimWorker, ...]
    tasks: tuple[Task, ...] = field(repr=False)
    error_correlation: dict[str, float] = field(default_factory=dict)  # per domain; 0.5 where not named
    unseen: tuple[Task, ...] = field(default=(), repr=False)  # known and calibrated, never trained on
    judge: Optional[SimJudge] = None


def _task_set(source: TaskSource, config: SimulatorConfig, where: str) -> tuple[Task, ...]:
    if source.builtin == "toy":
        return tuple(toy_tasks(config.toy_items_per_domain, config.seed))
    if source.builtin == "open-ended":
        return tuple(load_tasks(DatasetSpec.model_validate(open_ended_entry())))
    tasks: list[Task] = []
    for index, spec in enumerate(preset_datasets(source, config.model_dump(), where)):
        try:
            tasks += load_tasks(spec)
        except FileNotFoundError:
            given = source.datasets[index]["path"]
            how = f" ({given} with simulator.data_dir={config.data_dir})" if "{data_dir}" in given else ""
            raise FileNotFoundError(f"simulator.preset {config.preset}: {where}.datasets.{index}.path {spec.path}"
                                    f"{how}: not found") from None
    return tuple(tasks)


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
    tasks = _task_set(spec.tasks, config, "tasks")
    unseen = _task_set(spec.unseen, config, "unseen") if spec.unseen else ()
    for domain in sorted({t.domain for t in tasks + unseen}):  # an uncalibrated domain would score 0 unseen
        missing = [w.name for w in workers if domain not in w.accuracy]
        if missing:
            raise ValueError(f"simulator.preset {config.preset}: no accuracy for domain {domain!r} "
                             f"in worker(s) {', '.join(missing)}")
    judged = [t for t in tasks + unseen if registry.get(t.verifier).by_judge]
    if judged and spec.judge is None:
        raise ValueError(f"simulator.preset {config.preset}: judged tasks ({judged[0].id}, ...) need a `judge:` entry")
    unknown = [t.id for t in judged if not t.answer]
    if unknown:  # the simulated workers and judge take the reference for the truth
        raise ValueError(f"simulator.preset {config.preset}: judged task {unknown[0]} has no reference answer, "
                         "which the simulator needs as its truth")
    judge = SimJudge(**spec.judge.model_dump()) if spec.judge else None
    return SimPreset(spec.name, workers, tasks, dict(spec.error_correlation), unseen, judge)


def simulated_pool_config(preset: SimPreset, base_url: str, **provider_limits: object) -> PoolConfig:
    """The pool spec that calls ``preset``'s workers, and its judge, on a simulator at ``base_url`` (one provider)."""
    provider = ProviderSpec(id=SIMULATED_PROVIDER_ID, base_url=base_url, **provider_limits)
    workers, judges = ([WorkerSpec(id=w.name, description=w.description, provider=SIMULATED_PROVIDER_ID,
                                   price_in_per_m=w.price_in_per_m, price_out_per_m=w.price_out_per_m) for w in group]
                       for group in (preset.workers, (preset.judge,) if preset.judge else ()))
    return PoolConfig(providers=[provider], workers=workers, judges=judges)
