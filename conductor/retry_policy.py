"""Which worker-API failures to retry, and how long to wait.

Retry: 408, 409, 429, 5xx, timeouts, dropped connections and unparseable responses. Fail fast: 400
(including context-length errors), 401, 403, 404, 422. Wait: the server's ``retry-after-ms`` or
``Retry-After`` (seconds or an HTTP date), capped; otherwise exponential backoff with full jitter,

    sleep = uniform(0, min(backoff_max, backoff_base * 2 ** attempt))

so that many clients retrying together spread out instead of arriving as one wave.
"""

from __future__ import annotations

import email.utils
import json
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Optional

import httpx
import openai

RETRYABLE_STATUS = {408, 409, 429}
FAIL_FAST_KINDS = {400: "bad_request", 401: "auth", 403: "permission", 404: "not_found", 422: "bad_request"}
CONTEXT_LENGTH_HINTS = ("context length", "context_length", "maximum context", "too many tokens", "max_model_len")


@dataclass(frozen=True)
class Failure:
    kind: str
    retryable: bool
    message: str
    status: Optional[int] = None
    retry_after_s: Optional[float] = None
    billed_usd: Optional[float] = None  # a reply with usage but no usable answer: what it was billed


def _seconds(value: str, scale: float, cap_s: float) -> Optional[float]:
    """A header's number of seconds within [0, cap_s]; None for one that is no finite number ("nan")."""
    seconds = float(value) / scale
    return min(max(seconds, 0.0), cap_s) if math.isfinite(seconds) else None


def retry_after_seconds(headers: Optional[Mapping[str, str]], cap_s: float) -> Optional[float]:
    if not headers:
        return None
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            seconds = _seconds(value, 1000.0, cap_s)
            if seconds is not None:
                return seconds
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return _seconds(value, 1.0, cap_s)
    except ValueError:
        parsed = email.utils.parsedate_tz(value)
        if parsed is None:
            return None
        return min(max(email.utils.mktime_tz(parsed) - time.time(), 0.0), cap_s)


def classify(exc: BaseException, retry_after_cap_s: float) -> Failure:
    """Map an exception from the openai client (or httpx below it) to a Failure."""
    if isinstance(exc, (openai.APITimeoutError, TimeoutError)):  # TimeoutError: a stream's whole-attempt limit
        return Failure("timeout", True, "request timed out")
    if isinstance(exc, openai.APIConnectionError):
        return Failure("connection", True, f"connection failed ({type(exc.__cause__ or exc).__name__})")
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        message = _status_message(exc)
        if status == 429:
            return Failure("rate_limited", True, message, status,
                           retry_after_seconds(exc.response.headers, retry_after_cap_s))
        if status in RETRYABLE_STATUS or status >= 500:
            kind = "server_error" if status >= 500 else ("timeout" if status == 408 else "conflict")
            return Failure(kind, True, message, status,
                           retry_after_seconds(exc.response.headers, retry_after_cap_s))
        if status == 400 and any(hint in message.lower() for hint in CONTEXT_LENGTH_HINTS):
            return Failure("context_length", False, message, status)
        return Failure(FAIL_FAST_KINDS.get(status, "client_error"), False, message, status)
    if isinstance(exc, (openai.APIResponseValidationError, json.JSONDecodeError, ValueError, IndexError)):
        return Failure("malformed_response", True, f"response could not be parsed ({type(exc).__name__})")
    if isinstance(exc, (httpx.TransportError, ConnectionError)):
        return Failure("connection", True, f"transport error ({type(exc).__name__})")
    return Failure("unexpected", False, f"{type(exc).__name__}: {exc}")


def _status_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return f"HTTP {exc.status_code}: {inner['message']}"[:500]
    return f"HTTP {exc.status_code}"


def backoff_seconds(attempt: int, base_s: float, max_s: float, rng: random.Random) -> float:
    return rng.uniform(0.0, min(max_s, base_s * (2 ** attempt)))
