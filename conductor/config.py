"""The one typed configuration: YAML presets in ``configs/`` plus dotted ``--set a.b=value`` overrides.

Every section forbids unknown keys, so a typo fails before any actor starts, with the key's dotted path.
Later subsystems add sections here; there is no second config mechanism.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Literal, Optional, Sequence

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


class WorkerSpec(Section):
    """One worker LLM as the Conductor sees it; the pool issue adds endpoint and limit fields."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:\-]+$")
    description: str = Field(min_length=1)
    price_in_per_m: Optional[float] = Field(default=None, ge=0, description="USD per 1M input tokens")
    price_out_per_m: Optional[float] = Field(default=None, ge=0, description="USD per 1M output tokens")


class PoolConfig(Section):
    workers: list[WorkerSpec] = Field(default_factory=list)
    subset_size: Optional[int] = Field(default=None, ge=1, description="random pool subset per question")

    @model_validator(mode="after")
    def _unique_ids(self) -> "PoolConfig":
        ids = [w.id for w in self.workers]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            raise ValueError(f"duplicate worker ids: {duplicates}")
        if self.subset_size is not None and self.workers and self.subset_size > len(self.workers):
            raise ValueError(f"subset_size {self.subset_size} > number of workers {len(self.workers)}")
        return self


class ExecutorConfig(Section):
    max_steps: int = Field(default=5, ge=1, le=32)
    max_rounds: int = Field(default=1, ge=0, le=8, description="recursive rounds after the root workflow")
    question_visibility: Literal["first", "all"] = "all"
    parallel_steps: bool = True


class PromptConfig(Section):
    fewshot_file: Optional[str] = Field(default=None, description="JSON list of examples; None = packaged set")
    num_fewshot: int = Field(default=4, ge=0, le=32)
    show_prices: bool = True


class RewardConfig(Section):
    format_error: float = 0.0
    wrong: float = 0.5
    correct: float = 1.0
    cost_penalty_per_usd: float = Field(default=0.0, ge=0.0, description="lambda in reward - lambda * $")


class DatasetSpec(Section):
    format: Literal["math500", "gsm8k", "aime", "mmlu", "humaneval", "gpqa", "livecodebench"]
    path: str = Field(min_length=1, description="local path or s3://bucket/key (fsspec)")
    limit: Optional[int] = Field(default=None, ge=1)
    shuffle_seed: int = 0


class DataConfig(Section):
    datasets: list[DatasetSpec] = Field(default_factory=list)


class VerifierConfig(Section):
    math_timeout_s: float = Field(default=5.0, gt=0, le=120)
    code_timeout_s: float = Field(default=10.0, gt=0, le=600)
    code_memory_mb: int = Field(default=1024, ge=64, le=65536)
    require_code_isolation: bool = Field(
        default=False, description="refuse to run code when a kernel sandbox layer is unavailable")


class Config(Section):
    run_name: str = Field(default="demo", pattern=r"^[A-Za-z0-9_.\-]+$")
    seed: int = 0
    pool: PoolConfig = Field(default_factory=PoolConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)


class ConfigError(ValueError):
    """A config that cannot be used; the message names every offending key path."""


def load_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> Config:
    """Load a YAML preset (or defaults), apply ``a.b.c=value`` overrides, validate."""
    raw: dict[str, Any] = {}
    if path is not None:
        try:
            raw = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read config {path}: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"config {path}: top level must be a mapping, got {type(raw).__name__}")
    for override in overrides:
        apply_override(raw, override)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, source=str(path or "<defaults>"))) from None


def apply_override(raw: dict[str, Any], override: str) -> None:
    """Set ``a.b.0.c=value`` in a nested dict; the value is parsed as YAML (so 3, true, [1, 2] work)."""
    key, sep, value_text = override.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {override!r}: expected dotted.key=value")
    try:
        value = yaml.safe_load(value_text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"override {override!r}: value is not valid YAML: {exc}") from None
    parts = key.strip().split(".")
    node: Any = raw
    for depth, part in enumerate(parts[:-1]):
        node = _child(node, part, parts[: depth + 1], create=True)
    last = parts[-1]
    if isinstance(node, list):
        node[_list_index(node, last, parts)] = value
    elif isinstance(node, dict):
        node[last] = value
    else:
        raise ConfigError(f"override {override!r}: {'.'.join(parts[:-1])} is not a section")


def _child(node: Any, part: str, path: list[str], create: bool) -> Any:
    if isinstance(node, list):
        return node[_list_index(node, part, path)]
    if not isinstance(node, dict):
        raise ConfigError(f"override path {'.'.join(path)}: parent is a value, not a section")
    if part not in node or node[part] is None:
        node[part] = {}
    return node[part]


def _list_index(node: list, part: str, path: list[str]) -> int:
    if not part.isdigit() or int(part) >= len(node):
        raise ConfigError(f"override path {'.'.join(path)}: {part!r} is not an index of a {len(node)}-item list")
    return int(part)


def format_validation_error(exc: ValidationError, source: str) -> str:
    lines = [f"invalid config ({source}): {exc.error_count()} problem(s)"]
    for error in exc.errors():
        where = ".".join(str(p) for p in error["loc"]) or "<top level>"
        if error["type"] == "extra_forbidden":
            lines.append(f"  {where}: unknown key")
        else:
            lines.append(f"  {where}: {error['msg']} (got {error.get('input')!r})")
    return "\n".join(lines)


def config_from_cli(argv: Sequence[str] | None = None, default_config: str | None = None,
                    description: str = "") -> Config:
    """The single command-line shape every entry point shares: ``--config FILE --set a.b=v ...``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", default=default_config, help="YAML preset under configs/")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="dotted override, e.g. executor.max_steps=3 (repeatable)")
    args = parser.parse_args(argv)
    try:
        return load_config(args.config, args.overrides)
    except ConfigError as exc:
        parser.exit(2, f"{exc}\n")
