"""Read dataset files (JSONL, JSONL.gz, JSON, Parquet, CSV) from a local path or any fsspec URL such as
``s3://bucket/key``, and turn them into Tasks through the field map of the format the config names."""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
from typing import Any

import fsspec
import pyarrow.parquet as pq

from conductor.config import DatasetSpec
from conductor.tasks.field_map import Row, tasks_from_rows
from conductor.tasks.formats import PRESETS
from conductor.tasks.task import Task


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


def load_tasks(spec: DatasetSpec, storage_options: dict[str, Any] | None = None) -> list[Task]:
    rows = read_rows(spec.path, storage_options)
    tasks = tasks_from_rows(rows, PRESETS[spec.format], spec.shuffle_seed, spec.path)
    if spec.shuffle_seed:
        random.Random(spec.shuffle_seed).shuffle(tasks)
    return tasks[: spec.limit] if spec.limit else tasks
