"""Simulated worker line-ups and the task sets they know.

``toy``: three specialists, right 90% of the time in their own synthetic domain and 20% elsewhere, so
the best single worker and a random router score about 0.43 and a perfect router about 0.9.

``paper-7``: the seven workers of the paper's constrained in-domain table, calibrated per worker to its
MATH-500, MMLU and LiveCodeBench accuracy on MATH-500, MMLU-STEM and HumanEval items from ../shared/data
(the LCB column is used for the code items). Prices are illustrative list prices, USD per 1M tokens.
Beside its tasks, ``paper-7`` knows three task types that nothing trains on (``SimPreset.unseen``: AIME-,
GPQA- and BigCodeBench-like), calibrated by an assumed rule from the paper's Table 2 best-single figures;
conductor/simulator/unseen.py says which and how. Their subjects are kept out of the MMLU training rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conductor.config import PoolConfig, ProviderSpec, SimulatorConfig, WorkerSpec
from conductor.simulator.unseen import UNSEEN_ERROR_CORRELATION, UNSEEN_SUBJECTS, unseen_accuracy, unseen_tasks
from conductor.tasks.formats import preset_tasks
from conductor.tasks.loader import read_rows
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


def _toy_workers() -> tuple[SimWorker, ...]:
    def specialist(name: str, domain: str, what: str, price: float) -> SimWorker:
        skills = {d: (0.9 if d == domain else 0.2) for d in ("arithmetic", "reverse", "sort")}
        return SimWorker(name, f"a model that is strong at {what}", skills, 40.0, 0.4, price, price * 4)

    return (specialist("toy-arith", "arithmetic", "arithmetic", 0.5),
            specialist("toy-reverse", "reverse", "spelling words backwards", 0.3),
            specialist("toy-sort", "sort", "sorting numbers", 0.2))


PAPER7_TABLE = {  # name: (MATH500, MMLU, LCB, description, latency ms, $ in, $ out, hidden reasoning, visible tokens)
    "gemini-2.5-pro": (85.3, 91.5, 40.1, "a frontier reasoning model, strongest at mathematics", 900, 1.25, 10.0,
                       700, 200),
    "claude-sonnet-4": (82.9, 90.7, 38.0, "a frontier model, strong at careful analysis and writing", 800, 3.0, 15.0,
                        300, 200),
    "gpt-5": (74.5, 89.8, 57.5, "a frontier model, strongest at programming", 1000, 1.25, 10.0, 700, 200),
    "r1-distill-32b": (78.5, 84.4, 24.9, "an open 32B reasoning model distilled for math", 700, 0.3, 0.9, 0, 1000),
    "gemma-3-27b": (37.5, 63.6, 7.2, "a small open general-purpose model, fast and cheap", 250, 0.1, 0.2, 0, 200),
    "qwen3-32b-reasoning": (76.9, 83.3, 31.2, "an open 32B model in thinking mode", 900, 0.3, 1.2, 0, 1000),
    "qwen3-32b-direct": (73.2, 84.0, 26.8, "an open 32B model answering directly", 300, 0.3, 1.2, 0, 200),
}
"""Token lengths are illustrative: API reasoning models bill hidden reasoning; open reasoning models served
without a reasoning parser show their thinking, so whoever reads their answer pays for it too."""


# MMLU errors are shared more than math or code errors: mislabeled items and one attractive distractor trip
# every model alike. At 0.75 the paper's MoA lands within 0.3 points on MMLU; at 0.5 it sits 3.5 above.
PAPER7_ERROR_CORRELATION = {"mmlu": 0.75} | UNSEEN_ERROR_CORRELATION


def _paper7_workers() -> tuple[SimWorker, ...]:
    seen = {name: {"math500": m / 100, "mmlu": u / 100, "code": c / 100}
            for name, (m, u, c, *_rest) in PAPER7_TABLE.items()}
    unseen = unseen_accuracy(seen)
    return tuple(SimWorker(name, desc, seen[name] | unseen[name], latency, 0.5, p_in, p_out, visible, hidden)
                 for name, (m, u, c, desc, latency, p_in, p_out, hidden, visible) in PAPER7_TABLE.items())


def paper7_tasks(data_dir: str, mmlu_items: int, seed: int) -> tuple[Task, ...]:
    """The first ``mmlu_items`` MMLU rows outside the unseen subjects (ids keep their row index); for
    ``mmlu_items`` <= 1,333 that filter is a no-op, as every unseen subject lies further down the file."""
    root = Path(data_dir)
    mmlu = [t for t in preset_tasks(read_rows(str(root / "mmlu_stem.jsonl")), "mmlu", seed)
            if t.meta["subject"] not in UNSEEN_SUBJECTS][:mmlu_items]
    return tuple(preset_tasks(read_rows(str(root / "math500.jsonl")), "math500", seed)
                 + mmlu + preset_tasks(read_rows(str(root / "humaneval.jsonl.gz")), "humaneval", seed))


def load_preset(config: SimulatorConfig) -> SimPreset:
    if config.preset == "toy":
        return SimPreset("toy", _toy_workers(), tuple(toy_tasks(config.toy_items_per_domain, config.seed)))
    return SimPreset("paper-7", _paper7_workers(), paper7_tasks(config.data_dir, config.mmlu_items, config.seed),
                     PAPER7_ERROR_CORRELATION, unseen_tasks(config.data_dir, config.seed))


def simulated_pool_config(preset: SimPreset, base_url: str, **provider_limits: object) -> PoolConfig:
    """The pool spec that calls ``preset``'s workers on a simulator at ``base_url`` (one provider)."""
    provider = ProviderSpec(id="sim", base_url=base_url, **provider_limits)
    workers = [WorkerSpec(id=w.name, description=w.description, provider="sim", price_in_per_m=w.price_in_per_m,
                          price_out_per_m=w.price_out_per_m) for w in preset.workers]
    return PoolConfig(providers=[provider], workers=workers)
