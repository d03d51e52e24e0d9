"""Read dataset files (JSONL, JSONL.gz, JSON, Parquet, CSV) from a local path or any fsspec URL such as
``s3://bucket/key``, and turn them into Tasks through the entry's field map: a built-in preset named by
``format``, or the map the entry spells out."""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import fsspec
import pyarrow.parquet as pq

from conductor.tasks.field_map import FieldMap, Row, tasks_from_rows
from conductor.tasks.formats import PRESETS
from conductor.tasks.row_filter import select_rows
from conductor.tasks.task import Task

if TYPE_CHECKING:  # conductor.config imports the tasks package (VerifierKind) while it loads
    from conductor.dataset_config import DatasetSpec


def read_rows(path: str, storage_options: dict[str, Any] | None = None) -> list[Row]:
    with fsspec.open(path, "rb", **(storage_options or {})) as handle:
        data = handle.read()
    name = path.lower()
    if name.endswith(".gz"):
        data, name = gzip.decompress(data), name[:-3]
    if name.endswith(".parquet"):
        return pq.read_table(io.BytesIO(data)).to_pylist()
    text = data.decode("utf-8")
    if name.endswith(".csv"):
        return list(csv.DictReader(io.StringIO(text)))
    if name.endswith(".json"):
        loaded = json.loads(text)
        return loaded if isinstance(loaded, list) else [loaded]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
    return rows


def spec_field_map(spec: DatasetSpec) -> FieldMap:
    """The entry's field map: its preset, or the one its keys spell out (checked at config load)."""
    if spec.format is not None:
        preset = PRESETS[spec.format]
        if spec.domain is not None:
            preset = replace(preset, domain_value=spec.domain)
        if spec.reward_function is not None:
            preset = replace(preset, reward_function=spec.reward_function)  # scored by the user's reward
        if spec.reward_server is not None:
            preset = replace(preset, reward_server=spec.reward_server)  # scored by the user's server
        return preset
    fields = spec.fields

    def columns(value: str | list[str] | None) -> tuple[str, ...]:
        return () if value is None else (value,) if isinstance(value, str) else tuple(value)

    return FieldMap(spec.verifier, question=columns(fields and fields.question), template=spec.template,
                    answer=columns(fields and fields.answer), id=columns(fields and fields.id),
                    domain=columns(fields and fields.domain), domain_value=spec.domain, id_prefix=spec.id_prefix,
                    instruction=spec.instruction, reward_function=spec.reward_function,
                    reward_server=spec.reward_server,
                    meta=tuple((key, tuple(cols)) for key, cols in spec.meta_columns().items()))


def load_tasks(spec: DatasetSpec, storage_options: dict[str, Any] | None = None) -> list[Task]:
    """Read, filter (conductor/tasks/row_filter.py), map, then shuffle (``shuffle_seed``) and cut (``limit``)."""
    rows, numbers = select_rows(read_rows(spec.path, storage_options), spec.include, spec.exclude,
                                spec.drop_duplicates, spec.path)
    tasks = tasks_from_rows(rows, spec_field_map(spec), spec.shuffle_seed, spec.path, numbers)
    if spec.shuffle_seed:
        random.Random(spec.shuffle_seed).shuffle(tasks)
    return tasks[: spec.limit] if spec.limit else tasks
