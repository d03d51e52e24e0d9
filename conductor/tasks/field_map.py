"""The one path from dataset rows to Tasks: a field map names the columns that hold each part of a task.

A built-in format (conductor/tasks/formats.py) is a field map plus, where a map cannot say it (option
shuffling, code tests, gold-number extraction), a transform that finishes each mapped row. A config's
generic dataset entry is a field map alone. Rows are checked as they are mapped, so a bad file fails at
load with its path, the row (1-based) and the field, not mid-run.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from conductor.tasks.task import Task, VerifierKind
from conductor.verifiers import registry
from conductor.verifiers.multiple_choice import LETTERS

if TYPE_CHECKING:
    from conductor.verifiers.http_reward import RewardServer

Row = dict[str, Any]
USER_REWARD: VerifierKind = "python"  # the kind that scores a map with a reward_function
USER_SERVER: VerifierKind = "http"  # the kind that scores a map with a reward_server
Columns = tuple[str, ...]  # tried in order: the first with a value (not null, not "") is used


class RowFormatError(ValueError):
    """A dataset row the field map cannot read; the message names the file, the row (1-based) and the field."""


class FieldError(LookupError):
    """A field a row lacks (or holds no usable value in), raised while mapping one row; the caller adds where."""

    def __init__(self, field_name: str, problem: str) -> None:
        super().__init__(f"{field_name}: {problem}")
        self.field_name, self.problem = field_name, problem


@dataclass
class Draft:
    """One row mapped to a task's parts; a transform may change any of them before the Task is made."""

    id: str
    domain: str
    question: str
    answer: str
    verifier: VerifierKind
    meta: dict[str, Any]


Transform = Callable[[Draft, Row, int], None]  # (draft, raw row, shuffle seed): finishes the draft in place


@dataclass(frozen=True)
class FieldMap:
    """Where each part of a task comes from. ``id`` () means the 0-based row index; ``id_prefix`` None means
    "{domain}/"; ``instruction`` None means the verifier's own (its registry entry's), "" none.
    ``optional`` lists "id", "answer" or meta keys a row may lack (the index, "" or None stand in)."""

    verifier: VerifierKind
    question: Columns = ()
    template: Optional[str] = None
    answer: Columns = ()
    id: Columns = ()
    domain: Columns = ()
    domain_value: Optional[str] = None
    id_prefix: Optional[str] = None
    instruction: Optional[str] = None
    meta: tuple[tuple[str, Columns], ...] = ()
    optional: frozenset[str] = frozenset()
    reward_function: Optional[str] = None  # the user's "module:function": its tasks are scored by it (python)
    reward_server: Optional[RewardServer] = None  # verifier http: the user's server
    transform: Optional[Transform] = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if bool(self.question) == (self.template is not None):
            raise ValueError("a field map takes a question column or a template, exactly one")
        if bool(self.domain) == (self.domain_value is not None):
            raise ValueError("a field map takes a domain column or a domain value, exactly one")
        if self.template is not None:
            template_fields(self.template)


def template_fields(template: str) -> list[str]:
    """The columns a ``str.format`` template names, e.g. ``"{title}\\n\\n{body}"``; ValueError if it names
    none, or uses a positional field, an attribute or an item (a column name is the whole field)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"template {template!r}: {exc}") from None
    names = []
    for _text, name, spec, _conversion in parsed:
        if name is None:
            continue
        if not name.strip() or name.isdigit() or any(c in name for c in ".[]") or "{" in (spec or ""):
            raise ValueError(f"template {template!r}: {{{name}}} is not a column name (no positional fields, "
                             "attributes, items or nested fields)")
        names.append(name)
    if not names:
        raise ValueError(f"template {template!r} names no column")
    return names


def empty(value: Any) -> bool:
    """Null, "" and a float NaN (how pandas and Polars write a missing value) hold nothing."""
    return value is None or value == "" or (isinstance(value, float) and math.isnan(value))


def lookup(row: Row, columns: Sequence[str]) -> Any:
    """``row[a] or row[b] or ...`` where only an ``empty`` value counts as empty: the last column's otherwise."""
    value = None
    for column in columns:
        value = row.get(column)
        if not empty(value):
            return value
    return None if isinstance(value, float) else value  # a NaN reads as null


def required(row: Row, columns: Sequence[str]) -> Any:
    """The first usable value of ``columns``; FieldError naming them when there is none."""
    value = lookup(row, columns)
    if empty(value):
        raise FieldError(" or ".join(columns), _absence(row, columns))
    return value


def _absence(row: Row, columns: Sequence[str]) -> str:
    if any(column in row for column in columns):
        return "empty or null"
    return f"missing (the row has {sorted(row)})"


def _render(template: str, row: Row) -> str:
    values = {}
    for name in template_fields(template):
        if row.get(name) is None:
            raise FieldError(name, _absence(row, [name]) if name not in row else "null")
        values[name] = row[name]
    try:
        return template.format_map(values)
    except (ValueError, TypeError) as exc:  # a format spec the value cannot take ({price:.2f} over CSV text)
        raise FieldError("template", f"{template!r} cannot format this row's values ({exc})") from None


def _draft(row: Row, index: int, fields: FieldMap) -> Draft:
    domain = fields.domain_value if fields.domain_value is not None else str(required(row, fields.domain))
    question = _render(fields.template, row) if fields.template is not None else str(required(row, fields.question))
    if not question.strip():
        raise FieldError(" or ".join(fields.question) or "template", "empty question")
    answer = ""
    if fields.answer:
        answer = str(lookup(row, fields.answer) or "") if "answer" in fields.optional else str(
            required(row, fields.answer))
    key = index
    if fields.id:
        key = lookup(row, fields.id)
        if key is None or key == "":
            key = index if "id" in fields.optional else required(row, fields.id)
    prefix = f"{domain}/" if fields.id_prefix is None else fields.id_prefix
    meta = {}
    for name, columns in fields.meta:
        if name not in fields.optional and not any(column in row for column in columns):
            raise FieldError(" or ".join(columns), _absence(row, columns))
        meta[name] = lookup(row, columns)
    return Draft(f"{prefix}{key}", domain, question, answer, fields.verifier, meta)


def _check_choice(draft: Draft, fields: FieldMap) -> None:
    """The choice verifier reads an option count (an int, though a CSV gives text) and a gold letter within it."""
    column = " or ".join(dict(fields.meta).get("num_options", ("num_options",)))
    try:
        count = int(draft.meta["num_options"])
    except (KeyError, TypeError, ValueError):
        raise FieldError(column, f"{draft.meta.get('num_options')!r} is not a number of options") from None
    if not 1 <= count <= len(LETTERS):
        raise FieldError(column, f"{count} options; 1 to {len(LETTERS)} are possible")
    gold = draft.answer.strip().upper()
    if len(gold) != 1 or gold not in LETTERS[:count]:
        raise FieldError(" or ".join(fields.answer) or "answer", f"{draft.answer!r} is not one of the letters "
                         f"{LETTERS[:count]}")
    draft.meta["num_options"], draft.answer = count, gold


def _check_reference(draft: Draft, fields: FieldMap) -> None:
    spec = registry.get(draft.verifier)
    problem = spec.reference_problem(draft.answer) if spec.reference_problem and draft.answer else None
    if problem:
        raise FieldError(" or ".join(fields.answer) or "answer", problem)


def tasks_from_rows(rows: Iterable[Any], fields: FieldMap, seed: int = 0, source: str = "<rows>",
                    row_numbers: Optional[Sequence[int]] = None) -> list[Task]:
    """Map every row, in order; RowFormatError at the first row that lacks a field or repeats an id.
    ``row_numbers`` are the rows' 1-based numbers in the file when some were filtered out (for messages)."""
    instruction = registry.get(fields.verifier).instruction if fields.instruction is None else fields.instruction
    tasks, first_row = [], {}
    for index, row in enumerate(rows):
        number = row_numbers[index] if row_numbers is not None else index + 1
        where = f"{source}: row {number}"
        if not isinstance(row, dict):
            raise RowFormatError(f"{where}: not an object with fields (got {type(row).__name__})")
        try:
            draft = _draft(row, index, fields)
            if fields.transform is not None:
                fields.transform(draft, row, seed)
            if draft.verifier == "choice":
                _check_choice(draft, fields)
            _check_reference(draft, fields)
        except FieldError as exc:
            raise RowFormatError(f"{where}: field {exc.field_name!r}: {exc.problem}") from None
        if draft.id in first_row:
            raise RowFormatError(f"{where}: field {' or '.join(fields.id) or 'id'!r}: id {draft.id!r} repeats "
                                 f"row {first_row[draft.id]}")
        first_row[draft.id] = number
        prompt = f"{draft.question}\n\n{instruction}" if instruction else draft.question
        # a preset scored by the user's reward keeps its rows, checks and instruction; the function scores
        verifier = USER_REWARD if fields.reward_function else USER_SERVER if fields.reward_server else draft.verifier
        tasks.append(Task(draft.id, draft.domain, prompt, draft.answer, verifier, draft.meta, fields.reward_function,
                          fields.reward_server))
    return tasks
