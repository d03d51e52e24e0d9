"""A request body from bytes to a JSON object, with every client mistake a 400 in OpenAI's shape.

JSON allows what no tokenizer or worker API takes: an unpaired UTF-16 surrogate (``"\\ud800"`` is valid
JSON, but not encodable as UTF-8) and nesting deep enough to exhaust the parser's recursion. Both are
refused here, naming where, before any of the body reaches the Conductor. So is a body of more than
``MAX_JSON_VALUES`` arrays, objects and separators, counted in the bytes before parsing: the parser holds
the interpreter for the whole of one call (half a second for 4 MB of ``[[],[],...]``), and a request's
own structure is a few dozen values; prose questions carry their commas inside strings, about one per
hundred characters, well below the bound even at the body size limit.
"""

from __future__ import annotations

import json
from typing import Any, Union

from conductor.serving.api_errors import ApiError, field_path

MAX_DEPTH = 64  # a request's own fields nest ~6 deep; metadata and the like are free-form but not deeper
MAX_JSON_VALUES = 250_000


def parse_json_body(raw: bytes) -> dict[str, Any]:
    if raw.count(b",") + raw.count(b"[") + raw.count(b"{") > MAX_JSON_VALUES:
        raise ApiError(400, f"The body holds more than {MAX_JSON_VALUES} JSON values.", code="invalid_json")
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ApiError(400, "The body is not valid JSON: it nests too deeply.", code="invalid_json") from None
    except (ValueError, UnicodeDecodeError):
        raise ApiError(400, "The body is not valid JSON.", code="invalid_json") from None
    if not isinstance(data, dict):
        raise ApiError(400, "The body must be a JSON object.", code="invalid_json")
    check_strings(data)
    return data


def check_strings(data: Any) -> None:
    """Walk the body (iteratively: no recursion for a hostile depth); refuse a nesting deeper than
    MAX_DEPTH and any key or string that is not valid Unicode text."""
    stack: list[tuple[Any, tuple[Union[str, int], ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise ApiError(400, f"The body nests deeper than {MAX_DEPTH} levels.", code="invalid_json")
        if isinstance(value, str):
            _require_text(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                _require_text(key, path)
                stack.append((item, (*path, key[:64])))
        elif isinstance(value, list):
            stack.extend((item, (*path, index)) for index, item in enumerate(value))


def _require_text(text: str, path: tuple[Union[str, int], ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        param = field_path(path) or None
        where = f" in {param}" if param else ""
        raise ApiError(400, f"Invalid request body: a string{where} holds an unpaired UTF-16 surrogate, which is "
                       "not text", param=param, code="invalid_value") from None
