"""Errors in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}`` with the HTTP status a
client library maps to its exception (401 AuthenticationError, 404 NotFoundError, 429 RateLimitError...)."""

from __future__ import annotations

from typing import Optional

from pydantic import ValidationError


class ApiError(Exception):
    def __init__(self, status: int, message: str, *, kind: str = "invalid_request_error",
                 param: Optional[str] = None, code: Optional[str] = None,
                 headers: Optional[dict[str, str]] = None):
        super().__init__(message)
        self.status, self.message, self.kind, self.param, self.code = status, message, kind, param, code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


def field_path(location: tuple) -> str:
    """``("messages", 0, "content")`` -> ``messages[0].content``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _union_member(part: object) -> bool:
    """Pydantic names the member of a union it tried (``str``, ``list[TextPart]``): not a field of the body."""
    return isinstance(part, str) and ("[" in part or part in {"str", "int", "float", "bool", "dict", "list"})


CODE_OF_ERROR = {"extra_forbidden": "unknown_parameter", "unsupported_parameter": "unsupported_parameter"}
MAX_PARAM_CHARS = 200


def from_validation(error: ValidationError) -> ApiError:
    """A 400 naming the first offending field (its dotted path) and what is wrong with it: an unknown field
    is ``unknown_parameter``, one the endpoint cannot honour ``unsupported_parameter``, any other
    ``invalid_value``. The path is cut short: it echoes the client's own keys."""
    first = error.errors(include_url=False, include_input=False)[0]
    field = (first.get("ctx") or {}).get("field")  # a model's own check names the field it refused
    location = tuple(part for part in first["loc"] if not _union_member(part)) + ((field,) if field else ())
    param = field_path(location)[:MAX_PARAM_CHARS] or None
    code = CODE_OF_ERROR.get(first["type"], "invalid_value")
    if code == "unknown_parameter":
        return ApiError(400, f"Unrecognized request argument supplied: {param}", param=param, code=code)
    message = first["msg"] if param is None else f"{param}: {first['msg']}"
    return ApiError(400, f"Invalid request body: {message}", param=param, code=code)
