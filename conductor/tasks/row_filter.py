"""Which rows of a file a dataset entry keeps: ``include`` / ``exclude`` by a column's value, then
``drop_duplicates`` over some columns (the first row of each combination stays).

Filtering comes before the field map, so a row-index id counts the rows kept, as if they were the file;
that is what keeps the paper-7 preset's questions, ids and option orders what they were when these sets
were special-cased in code. Every row must hold each column a filter names: a misspelt column would
otherwise keep or drop everything silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from conductor.tasks.field_map import Row, RowFormatError

Values = Sequence[Any] | Mapping[Any, str]  # a list, or {value: why it is left out}


def _texts(values: Values) -> set[str]:
    """Compared as text, so 123 in a config matches a CSV's '123'."""
    return {str(value) for value in values}


def _value(row: Row, column: str, setting: str, where: str) -> Any:
    if column not in row:
        raise RowFormatError(f"{where}: field {column!r}: missing, which {setting} names (the row has {sorted(row)})")
    return row[column]


def select_rows(rows: Sequence[Any], include: Mapping[str, Values], exclude: Mapping[str, Values],
                drop_duplicates: Sequence[str], source: str) -> tuple[list[Any], list[int]]:
    """The rows kept, in file order, and their 1-based numbers in the file (for error messages)."""
    if not (include or exclude or drop_duplicates):
        return list(rows), list(range(1, len(rows) + 1))
    wanted = {column: _texts(values) for column, values in include.items()}
    unwanted = {column: _texts(values) for column, values in exclude.items()}
    kept, numbers, seen = [], [], set()
    for number, row in enumerate(rows, start=1):
        where = f"{source}: row {number}"  # every filter column is read on every row, so none goes unchecked
        if not isinstance(row, dict):
            raise RowFormatError(f"{where}: not an object with fields (got {type(row).__name__})")
        included = all([str(_value(row, c, "include", where)) in texts for c, texts in wanted.items()])
        excluded = any([str(_value(row, c, "exclude", where)) in texts for c, texts in unwanted.items()])
        key = json.dumps([_value(row, c, "drop_duplicates", where) for c in drop_duplicates], default=str)
        if not included or excluded or key in seen:
            continue
        if drop_duplicates:
            seen.add(key)
        kept.append(row)
        numbers.append(number)
    if not kept:
        raise RowFormatError(f"{source}: the filters (include, exclude, drop_duplicates) keep none of its "
                             f"{len(rows)} rows")
    return kept, numbers
