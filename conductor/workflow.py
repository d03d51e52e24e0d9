"""The workflow language: the three Python lists a Conductor writes after its free-text plan.

    model_id = [2, 0]
    subtasks = ["Design an algorithm for ...", "Implement the algorithm above ..."]
    access_list = [[], ["all"]]

Step i sends ``subtasks[i]`` to worker ``model_id[i]`` and shows it the (subtask, response) pairs of the
steps named by ``access_list[i]``: ``"all"`` (also ``["all"]`` / ``[["all"]]``), ``[]`` or earlier
step indices. Lists are read from their *last* occurrence in the text with ``ast.literal_eval`` only;
model output is never executed. Every rejection is a ``WorkflowParseError`` carrying a ``ParseFailure``.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Literal, Union

ALL: Literal["all"] = "all"
Access = Union[Literal["all"], tuple[int, ...]]
LIST_NAMES = ("model_id", "subtasks", "access_list")

MAX_TEXT_CHARS = 100_000  # a conductor emits ~1k tokens; anything this long is not a workflow
MAX_LITERAL_CHARS = 50_000
MAX_SCAN_FACTOR = 20  # the literals' scans read at most this many times the text: bounds adversarial work
MAX_NESTING = 6
_CURLY_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_ASSIGNMENT = re.compile(r"\b(model_id|subtasks|access_list)\s*=\s*(?=\[)")
_CONTINUATION = re.compile(r"[ \t]*[*+\-\[.(%@/]")  # `[0]*6` is an expression, not trailing text


class ParseFailure(str, Enum):
    MISSING_LIST = "missing_list"
    MALFORMED_LIST = "malformed_list"
    LENGTH_MISMATCH = "length_mismatch"
    TOO_MANY_STEPS = "too_many_steps"
    UNKNOWN_WORKER = "unknown_worker"
    NON_STRING_SUBTASK = "non_string_subtask"
    EMPTY_SUBTASK = "empty_subtask"
    INVALID_ACCESS = "invalid_access"
    FORWARD_REFERENCE = "forward_reference"
    SELF_REFERENCE = "self_reference"
    EMPTY_WORKFLOW = "empty_workflow"
    TEXT_TOO_LONG = "text_too_long"
    TRUNCATED = "truncated"  # the completion hit the token limit before its end-of-turn


class WorkflowParseError(ValueError):
    """The text is not a valid workflow; ``reason`` says which rule it broke."""

    def __init__(self, reason: ParseFailure, detail: str):
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Step:
    worker: int
    subtask: str
    access: Access  # "all" or sorted unique indices of earlier steps

    def visible_steps(self, index: int) -> tuple[int, ...]:
        """Indices of the earlier steps whose (subtask, response) this step sees."""
        return tuple(range(index)) if self.access == ALL else self.access


@dataclass(frozen=True)
class Workflow:
    steps: tuple[Step, ...] = field(default_factory=tuple)

    @property
    def accepts_previous(self) -> bool:
        """Three empty lists: in a recursive round, keep the previous answer."""
        return not self.steps

    def render(self) -> str:
        """The canonical text form; ``parse_workflow(w.render(), ...) == w``."""
        model_ids = "[" + ", ".join(str(s.worker) for s in self.steps) + "]"
        subtasks = "[" + ", ".join(_render_string(s.subtask) for s in self.steps) + "]"
        access = "[" + ", ".join(_render_access(s.access) for s in self.steps) + "]"
        return f"model_id = {model_ids}\nsubtasks = {subtasks}\naccess_list = {access}"


def parse_workflow(text: str, *, num_workers: int, max_steps: int, recursive_round: bool = False) -> Workflow:
    """Parse and validate the last workflow in ``text``.

    ``recursive_round`` allows three empty lists (accept the previous answer); in a root round they are
    a format error. Raises ``WorkflowParseError`` and nothing else.
    """
    if not isinstance(text, str):
        raise WorkflowParseError(ParseFailure.MALFORMED_LIST, f"expected text, got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise WorkflowParseError(ParseFailure.TEXT_TOO_LONG, f"{len(text)} characters > {MAX_TEXT_CHARS}")
    lists = _extract_lists(text)
    model_ids, subtasks, accesses = (lists[name] for name in LIST_NAMES)
    for name in LIST_NAMES:
        if not isinstance(lists[name], list):
            raise WorkflowParseError(ParseFailure.MALFORMED_LIST, f"{name} is not a list")
    if not (len(model_ids) == len(subtasks) == len(accesses)):
        raise WorkflowParseError(
            ParseFailure.LENGTH_MISMATCH,
            f"model_id has {len(model_ids)}, subtasks {len(subtasks)}, access_list {len(accesses)} entries",
        )
    if not model_ids:
        if recursive_round:
            return Workflow()
        raise WorkflowParseError(ParseFailure.EMPTY_WORKFLOW, "three empty lists are only valid in a recursive round")
    if len(model_ids) > max_steps:
        raise WorkflowParseError(ParseFailure.TOO_MANY_STEPS, f"{len(model_ids)} steps > max_steps={max_steps}")
    steps = tuple(
        Step(
            worker=_validate_worker(i, worker, num_workers),
            subtask=_validate_subtask(i, subtask),
            access=_normalise_access(i, access),
        )
        for i, (worker, subtask, access) in enumerate(zip(model_ids, subtasks, accesses))
    )
    return Workflow(steps)


def _extract_lists(text: str) -> dict[str, object]:
    """Find each list's last assignment that is not itself inside another parsed list's string.

    One pass forward: an assignment inside a list already parsed (``'model_id = [3]'`` quoted in a subtask)
    is skipped unread, however many a text quotes. The characters the literals' scans and parses read in all
    are bounded (``MAX_SCAN_FACTOR`` times the text): past that the text is adversarial, not a workflow."""
    chosen: dict[str, object] = {}
    parsed_until = 0
    budget = MAX_SCAN_FACTOR * len(text)
    for match in _ASSIGNMENT.finditer(text):
        if match.start() < parsed_until:
            continue
        start = match.end()
        end = _literal_end(text, start)
        budget -= (end if end is not None else min(len(text), start + MAX_LITERAL_CHARS)) - start
        value: object = _UNPARSED
        if end is not None and not _CONTINUATION.match(text, end):
            budget -= end - start
            value = _literal_value(text[start:end])
        if budget < 0:
            raise WorkflowParseError(ParseFailure.MALFORMED_LIST, "too many unfinished list assignments to read")
        if value is not _UNPARSED:
            parsed_until = end
        chosen[match.group(1)] = value
    for name in LIST_NAMES:
        if name not in chosen:
            raise WorkflowParseError(ParseFailure.MISSING_LIST, f"no '{name} = [...]' assignment found")
        if chosen[name] is _UNPARSED:
            raise WorkflowParseError(ParseFailure.MALFORMED_LIST, f"'{name}' is not a valid Python list literal")
    return chosen


class _Unparsed:
    pass


_UNPARSED = _Unparsed()


def _literal_end(text: str, start: int) -> int | None:
    """End index of the bracketed literal starting at ``text[start] == '['``, honouring quotes."""
    depth = 0
    i = start
    limit = min(len(text), start + MAX_LITERAL_CHARS)
    while i < limit:
        ch = text[i]
        if ch in "[(":
            depth += 1
            if depth > MAX_NESTING:
                return None
        elif ch in "])":
            depth -= 1
            if depth == 0:
                return i + 1
        elif ch in "\"'\u201c\u201d\u2018\u2019":
            i = _string_end(text, i, limit)
            if i is None:
                return None
            continue
        i += 1
    return None


def _string_end(text: str, i: int, limit: int) -> int | None:
    """Index just past the string literal opening at ``i`` (curly quotes close on either curly form)."""
    quote = text[i]
    closers = {'"': '"', "'": "'", "\u201c": "\u201d\u201c", "\u201d": "\u201d\u201c",
               "\u2018": "\u2019\u2018", "\u2019": "\u2019\u2018"}[quote]
    if text.startswith(quote * 3, i) and quote in "\"'":
        end = text.find(quote * 3, i + 3, limit)
        return None if end < 0 else end + 3
    i += 1
    while i < limit:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "\n":
            return None
        if ch in closers:
            return i + 1
        i += 1
    return None


def _literal_value(source: str) -> object:
    for attempt in (source, source.translate(_CURLY_QUOTES)):
        try:
            return ast.literal_eval(attempt)
        except Exception:  # literal_eval raises ValueError, SyntaxError, MemoryError, RecursionError...
            continue
    return _UNPARSED


def _validate_worker(step: int, worker: object, num_workers: int) -> int:
    if type(worker) is not int or not 0 <= worker < num_workers:
        raise WorkflowParseError(
            ParseFailure.UNKNOWN_WORKER,
            f"step {step}: model_id {worker!r} is not a worker index in 0..{num_workers - 1}",
        )
    return worker


def _validate_subtask(step: int, subtask: object) -> str:
    if not isinstance(subtask, str):
        raise WorkflowParseError(ParseFailure.NON_STRING_SUBTASK, f"step {step}: subtask is {type(subtask).__name__}")
    if not subtask.strip():
        raise WorkflowParseError(ParseFailure.EMPTY_SUBTASK, f"step {step}: subtask is empty")
    return subtask


def _normalise_access(step: int, access: object) -> Access:
    """Accept "all", ["all"], [["all"]], [] and lists (or a singly-wrapped list) of earlier indices."""
    if access == ALL:
        return ALL
    if not isinstance(access, (list, tuple)):
        raise WorkflowParseError(ParseFailure.INVALID_ACCESS, f"step {step}: access {access!r} is not a list")
    if len(access) == 1 and isinstance(access[0], (list, tuple)):
        access = access[0]
    if list(access) == [ALL]:
        return ALL
    indices = []
    for ref in access:
        if type(ref) is not int or ref < 0:
            raise WorkflowParseError(
                ParseFailure.INVALID_ACCESS, f"step {step}: access entry {ref!r} is not 'all' or a step index"
            )
        if ref == step:
            raise WorkflowParseError(ParseFailure.SELF_REFERENCE, f"step {step} lists itself in its access list")
        if ref > step:
            raise WorkflowParseError(ParseFailure.FORWARD_REFERENCE, f"step {step} refers to later step {ref}")
        indices.append(ref)
    return tuple(sorted(set(indices)))


def _render_string(value: str) -> str:
    rendered = json.dumps(value, ensure_ascii=False)
    try:
        if ast.literal_eval(rendered) == value:
            return rendered
    except Exception:
        pass
    return repr(value)  # always a valid literal (e.g. lone surrogates JSON cannot carry)


def _render_access(access: Access) -> str:
    return '["all"]' if access == ALL else "[" + ", ".join(map(str, access)) + "]"
