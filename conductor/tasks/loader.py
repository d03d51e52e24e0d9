"""Read dataset files (JSONL, JSONL.gz, JSON, Parquet, CSV) from a local path or any fsspec URL such as
``s3://bucket/key``, and turn them into Tasks through the entry's field map: a built-in preset named by
``format``, or the map the entry spells out."""

from __future__ import annotations

import csv
import gzip
import io
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from conductor.tasks.field_map import FieldMap, Row, RowFormatError, tasks_from_rows
from conductor.tasks.formats import PRESETS
from conductor.tasks.row_filter import select_rows
from conductor.tasks.task import Task

if TYPE_CHECKING:  # conductor.config imports the tasks package (VerifierKind) while it loads
    from conductor.dataset_config import DatasetSpec


def read_rows(path: str, storage_options: dict[str, Any] | None = None) -> list[Row]:
    """The file's rows; a file that cannot be decoded as its name says fails naming it (a UTF-8 byte-order
    mark, as spreadsheets save CSV, is read past)."""
    with fsspec.open(path, "rb", **(storage_options or {})) as handle:
        data = handle.read()
    try:
        return _decoded_rows(path, data)
    except (UnicodeDecodeError, OSError, EOFError, pa.ArrowException) as exc:
        raise RowFormatError(f"{path}: cannot be read as its name says ({type(exc).__name__}: "
                             f"{str(exc)[:200]})") from None


def _decoded_rows(path: str, data: bytes) -> list[Row]:
    name = path.lower()
    if name.endswith(".gz"):
        data, name = gzip.decompress(data), name[:-3]
    if name.endswith(".parquet"):
        return _with_float32_as_written(pq.read_table(io.BytesIO(data))).to_pylist()
    text = data.decode("utf-8-sig")
    if name.endswith(".csv"):
        return _csv_rows(path, text)
    if name.endswith(".json"):
        try:
            loaded = json.loads(text)
        except json.JSONDecodeError as exc:
            raise RowFormatError(f"{path}:{exc.lineno}: not a JSON document ({exc.msg})") from None
        return loaded if isinstance(loaded, list) else [loaded]
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
    return rows


def _with_float32_as_written(table: pa.Table) -> pa.Table:
    """Float32 columns as the numbers written (1266.77), not their float64 expansion (1266.77001953125),
    which would be a reference no stated answer matches."""
    for index, column in enumerate(table.schema):
        if column.type == pa.float32():
            shortest = pc.cast(pc.cast(table.column(index), pa.string()), pa.float64())
            table = table.set_column(index, column.name, shortest)
    return table


def _csv_rows(path: str, text: str) -> list[Row]:
    """The CSV's rows, each with exactly the header's columns: an unquoted comma would shift every later value
    into the wrong column, so a row of another length fails, naming its line; a column name the header repeats
    fails too (each row would keep its last such value, silently)."""
    reader = csv.DictReader(io.StringIO(text))
    repeated = sorted(name for name, count in Counter(reader.fieldnames or ()).items() if count > 1)
    if repeated:
        raise RowFormatError(f"{path}: line 1: the header repeats the column(s) {repeated}")
    rows = []
    for row in reader:
        if None in row or None in row.values():
            width = len(reader.fieldnames or ())
            got = width + len(row.get(None) or ()) if None in row else sum(v is not None for v in row.values())
            raise RowFormatError(f"{path}: line {reader.line_num}: {got} values where the header has {width} "
                                 "columns (quote a value that holds a comma)")
        rows.append(row)
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


def load_datasets(specs: Sequence[DatasetSpec]) -> list[Task]:
    """Every entry's tasks, in order; an id that two entries both give (two files of one domain without an id
    column both number their rows from 0) fails, naming both: evaluation and the routers key by id."""
    tasks: list[Task] = []
    first: dict[str, int] = {}
    for index, spec in enumerate(specs):
        for task in load_tasks(spec):
            other = first.setdefault(task.id, index)
            if other != index:
                raise RowFormatError(f"{spec.path}: id {task.id!r} is also an id of data.datasets[{other}] "
                                     f"({specs[other].path}); give the entries an id_prefix or an id column")
            tasks.append(task)
    return tasks


def load_tasks(spec: DatasetSpec, storage_options: dict[str, Any] | None = None) -> list[Task]:
    """Read, filter (conductor/tasks/row_filter.py), map, then shuffle (``shuffle_seed``) and cut (``limit``)."""
    read = read_rows(spec.path, storage_options)
    if not read:  # never a run on something else: a file with no rows is a mistake, not an empty task list
        raise RowFormatError(f"{spec.path}: no rows (an empty file, or a header alone)")
    rows, numbers = select_rows(read, spec.include, spec.exclude, spec.drop_duplicates, spec.path)
    tasks = tasks_from_rows(rows, spec_field_map(spec), spec.shuffle_seed, spec.path, numbers)
    if spec.shuffle_seed:
        random.Random(spec.shuffle_seed).shuffle(tasks)
    return tasks[: spec.limit] if spec.limit else tasks
