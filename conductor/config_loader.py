"""Loading a ``Config``: a YAML preset, ``a.b.c=value`` overrides, errors that name every offending key,
and the one command-line shape every entry point shares (``--config FILE --set a.b=v ...``)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from conductor.config import Config

SECRET_WORDS = ("key", "secret", "token", "password")
CREDENTIALS_IN_URL = re.compile(r"//[^/@\s'\"]*@")  # https://user:pass@host


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
        elif isinstance(error.get("input"), (dict, list, tuple)):  # a whole section's check: it may hold secrets
            lines.append(f"  {where}: {error['msg']}")
        elif any(word in where.lower() for word in SECRET_WORDS) or CREDENTIALS_IN_URL.search(repr(error.get("input"))):
            lines.append(f"  {where}: {error['msg']} (value hidden)")
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
