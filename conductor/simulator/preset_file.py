"""A simulated orchestra as a YAML file: its workers, judge, error correlation and task sets, in one typed schema.

``toy``, ``paper-7`` and ``toy-judged`` ship as conductor/simulator/presets_yaml/<name>.yaml (package data), so
a user's own line-up is a copy of one with the numbers changed: ``simulator.preset`` takes a shipped name or the
path of a file ending in .yaml/.yml, and a wrong one fails when the config loads, not when the simulator starts.

A task set is ``data.datasets`` entries, whose ``path`` and ``limit`` may name a ``simulator`` setting in
braces, filled in from the run's config: ``path: "{data_dir}/math500.jsonl"``, ``limit: "{mmlu_items}"``. So
a shipped preset finds ``simulator.data_dir`` (../shared/data) without an absolute path, and a run sizes it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, Optional

import yaml
from pydantic import Field, ValidationError, model_validator

from conductor.config_section import Section
from conductor.dataset_config import DatasetSpec

SHIPPED_DIR = Path(__file__).parent / "presets_yaml"
SHIPPED = ("toy", "paper-7", "toy-judged")
SETTING_KEYS = ("path", "limit")  # the entry keys that may name a simulator setting; a template's braces are columns
SETTING = re.compile(r"\{(\w+)\}")


class PresetWorker(Section):
    """One simulated worker; its accuracy per task domain as fractions or as percentages (divided by 100 on
    load, so a paper's table is copied as printed and gives the same floats as ``x / 100`` in code)."""

    name: str = Field(min_length=1)
    description: str = Field(min_length=1, description="what the Conductor's prompt says the worker is good at")
    accuracy: Optional[dict[str, float]] = Field(default=None, description="{domain: P(right)}, 0-1")
    accuracy_percent: Optional[dict[str, float]] = Field(default=None, description="{domain: P(right) in %}")
    latency_ms: float = Field(default=50.0, ge=0, description="mean latency of one answer (log-normal)")
    latency_sigma: float = Field(default=0.5, ge=0, description="log-normal spread of the latency")
    price_in_per_m: float = Field(default=0.0, ge=0, description="USD per 1M prompt tokens")
    price_out_per_m: float = Field(default=0.0, ge=0, description="USD per 1M completion tokens")
    answer_tokens: int = Field(default=0, ge=0, description="visible working before the final answer")
    reasoning_tokens: int = Field(default=0, ge=0, description="hidden reasoning, billed, never shown")

    @model_validator(mode="after")
    def _one_accuracy(self) -> PresetWorker:
        if (self.accuracy is None) == (self.accuracy_percent is None):
            raise ValueError(f"worker {self.name}: give accuracy (0-1) or accuracy_percent (0-100), one of them")
        limit = 1.0 if self.accuracy is not None else 100.0
        for domain, value in (self.accuracy or self.accuracy_percent or {}).items():
            if not 0 <= value <= limit:
                raise ValueError(f"worker {self.name}: accuracy for {domain} is {value}, outside 0-{limit:g}")
        return self

    def fractions(self) -> dict[str, float]:
        if self.accuracy is not None:
            return dict(self.accuracy)
        return {domain: value / 100 for domain, value in (self.accuracy_percent or {}).items()}


class PresetJudge(Section):
    """The pool's simulated judge (conductor/simulator/judge.py): called only to grade judged tasks
    (``verifier: judge``), never shown to the Conductor. It knows each item's truth and errs at ``error_rate``."""

    name: str = Field(min_length=1)
    description: str = Field(default="grades answers against a rubric", min_length=1)
    error_rate: float = Field(default=0.05, ge=0, le=1, description="P(its verdict is the wrong way round)")
    unparseable_rate: float = Field(default=0.0, ge=0, le=1, description="P(a reply with no score line)")
    latency_ms: float = Field(default=50.0, ge=0, description="mean latency of one verdict (log-normal)")
    latency_sigma: float = Field(default=0.5, ge=0, description="log-normal spread of the latency")
    price_in_per_m: float = Field(default=0.0, ge=0, description="USD per 1M prompt tokens")
    price_out_per_m: float = Field(default=0.0, ge=0, description="USD per 1M completion tokens")


class TaskSource(Section):
    """Where a task set comes from: a generated or packaged set by name (``toy``: conductor/tasks/toy.py, sized
    by ``simulator.toy_items_per_domain`` and seeded by ``simulator.seed``; ``open-ended``: the judged set of
    conductor/tasks/open_ended.py), or dataset files listed as ``data.datasets`` entries are (checked once
    their settings are filled in: ``preset_datasets``)."""

    builtin: Optional[Literal["toy", "open-ended"]] = None
    datasets: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _one_source(self) -> TaskSource:
        if (self.builtin is None) == (not self.datasets):
            raise ValueError("give builtin (toy, open-ended) or datasets, one of them")
        return self


def _fill(value: Any, settings: Mapping[str, Any], key: str) -> Any:
    """``"{name}"`` alone becomes the setting's value as it is (a number stays a number); inside a longer
    string, its text."""
    if not isinstance(value, str):
        return value
    for name in SETTING.findall(value):
        if name not in settings:
            raise ValueError(f"{key}: {{{name}}} is not a simulator setting (known: {', '.join(sorted(settings))})")
    whole = SETTING.fullmatch(value)
    if whole:
        return settings[whole.group(1)]
    return SETTING.sub(lambda match: str(settings[match.group(1)]), value)


def preset_datasets(source: TaskSource, settings: Mapping[str, Any], where: str) -> list[DatasetSpec]:
    """The set's entries with their ``{setting}`` placeholders filled in, each checked as a ``data.datasets``
    entry; ValueError naming ``where`` (e.g. 'unseen'), the entry's index and its key."""
    scalars = {name: value for name, value in settings.items() if isinstance(value, (str, int, float, bool))}
    specs = []
    for index, entry in enumerate(source.datasets):
        at = f"{where}.datasets.{index}"
        try:
            filled = {key: _fill(value, scalars, key) if key in SETTING_KEYS else value for key, value in entry.items()}
            specs.append(DatasetSpec.model_validate(filled))
        except ValidationError as exc:
            raise ValueError(f"{at}: {_problems(exc)}") from None
        except ValueError as exc:
            raise ValueError(f"{at}.{exc}") from None
    return specs


def _problems(exc: ValidationError) -> str:
    """One short line a problem, as the config loader prints them."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '<top>'}: {e['msg']}" for e in exc.errors())


class PresetFile(Section):
    """A whole preset; ``unseen`` holds task types known and calibrated but never trained on."""

    name: str = Field(min_length=1)
    workers: list[PresetWorker] = Field(min_length=1)
    error_correlation: dict[str, float] = Field(default_factory=dict, description="{domain: rho}; 0.5 elsewhere")
    unseen_accuracy: Optional[Literal["paper7_table2"]] = Field(
        default=None, description="a named rule that derives each worker's unseen-type accuracies from its "
        "seen ones (conductor/simulator/unseen.py); none: the workers list them")
    tasks: TaskSource
    unseen: Optional[TaskSource] = None
    judge: Optional[PresetJudge] = Field(default=None, description="grades judged tasks; none: the pool has no judge")

    @model_validator(mode="after")
    def _names_and_rates(self) -> PresetFile:
        names = [w.name for w in self.workers] + ([self.judge.name] if self.judge else [])
        if len(set(names)) != len(names):
            raise ValueError(f"worker names repeat (the judge's included): {names}")
        for domain, rho in self.error_correlation.items():
            if not 0 <= rho <= 1:
                raise ValueError(f"error_correlation for {domain} is {rho}, outside 0-1")
        return self


def preset_path(preset: str) -> Path:
    """The file behind a ``simulator.preset`` value: a shipped name, or a path ending in .yaml/.yml."""
    if preset in SHIPPED:
        return SHIPPED_DIR / f"{preset}.yaml"
    if not preset.endswith((".yaml", ".yml")):
        raise ValueError(f"unknown preset {preset!r}: give {' or '.join(SHIPPED)}, or a path ending in .yaml")
    if not Path(preset).is_file():
        raise ValueError(f"preset file {preset} not found")
    return Path(preset)


def read_preset_file(preset: str) -> PresetFile:
    path = preset_path(preset)
    try:
        return PresetFile.model_validate(yaml.safe_load(path.read_text()) or {})
    except ValidationError as exc:
        raise ValueError(f"preset file {path}: {_problems(exc)}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"preset file {path}: {exc}") from None
