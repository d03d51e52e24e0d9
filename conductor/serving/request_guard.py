"""The ASGI layer in front of the endpoint's routes: what every request gets before a route runs, and the
log line after it.

- A request id (``x-request-id``: the caller's if it is a sane token that does not look like a key, else a
  new one), echoed on the reply.
- The body's size and time: a declared ``Content-Length`` above ``serve.limits.max_body_bytes`` is a 413
  at once, before the key is checked or a byte is read; while a route reads the body, the running count
  is held to the same limit (chunked bodies too), and the whole body must arrive within
  ``serve.limits.body_timeout_s`` of the headers (408). Either error closes the connection, since the
  rest of the body is never read; so does any reply sent before the body was all read (a 401 to a request
  with a body, say): a client could otherwise keep the connection, and its slot, by trickling that body.
- Our own faults: an exception no route handled is a 500 in OpenAI's shape, logged by type and place only
  (its message may quote the request), and not re-raised, so no server layer logs it again with its
  message. A client that goes away while sending its body is logged as 499, with no traceback.
- One log line per request: the id, method, the route's template (never the raw path or its query,
  which a caller may put a key in), the key's id, status and latency.

Slow headers are the HTTP server's to time out (conductor/serving/http_protocol.py): a route never sees a
request whose headers have not all arrived.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
import traceback
import uuid
from typing import Any

from starlette.requests import ClientDisconnect

from conductor.serving.api_errors import ApiError

log = logging.getLogger("conductor.serve")
REQUEST_ID = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
KEY_LIKE = re.compile(r"^(sk|pk|rk|key|api|token|secret)[-_]", re.IGNORECASE)  # never logged as an id


class BodyTooLarge(ApiError):
    def __init__(self, limit: int):
        super().__init__(413, f"The body is larger than {limit} bytes.", code="too_large",
                         headers={"connection": "close"})


class BodyTooSlow(ApiError):
    def __init__(self, timeout_s: float):
        super().__init__(408, f"The body did not arrive within {timeout_s:g}s.", code="timeout",
                         headers={"connection": "close"})


def declared_length(headers: dict[bytes, bytes]) -> int | None:
    value = headers.get(b"content-length")
    if value is None:
        return None
    try:
        length = int(value)
    except ValueError:
        return -1
    return length if length >= 0 else -1


class RequestGuard:
    """Pure ASGI middleware (a stream passes through untouched)."""

    def __init__(self, app: Any, *, max_body_bytes: int, body_timeout_s: float):
        self.app, self.max_body_bytes, self.body_timeout_s = app, max_body_bytes, body_timeout_s

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        supplied = headers.get(b"x-request-id", b"").decode("latin-1")
        sane = REQUEST_ID.match(supplied) and not KEY_LIKE.match(supplied)
        request_id = supplied if sane else f"req_{uuid.uuid4().hex[:24]}"
        scope.setdefault("state", {}).update(request_id=request_id, key_id="-")
        started, status, started_reply = time.perf_counter(), [500], [False]
        length = declared_length(headers)
        finished = [not length and b"chunked" not in headers.get(b"transfer-encoding", b"").lower()]

        async def send_with_id(message: dict) -> None:
            if message["type"] == "http.response.start":
                status[0], started_reply[0] = message["status"], True
                reply_headers = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
                closing = any(name.lower() == b"connection" for name, _ in reply_headers)
                if not finished[0] and not closing:  # the rest of the body will never be read: close
                    reply_headers.append((b"connection", b"close"))
                message["headers"] = reply_headers
            await send(message)

        try:
            if length is not None and length > self.max_body_bytes:
                await _reply(send_with_id, BodyTooLarge(self.max_body_bytes))
            elif length == -1:
                await _reply(send_with_id, ApiError(400, "The Content-Length header is not a byte count.",
                                                    code="invalid_request", headers={"connection": "close"}))
            else:
                await self.app(scope, self._bounded(receive, finished), send_with_id)
        except ClientDisconnect:
            status[0] = 499  # nginx's "client closed request": nothing to answer
        except Exception as exc:  # a fault of ours that no route turned into a response
            log.error("%s failed: %s\n%s", request_id, type(exc).__name__, where(exc))
            if not started_reply[0]:
                await _reply(send_with_id, ApiError(500, "The server had an error processing the request.",
                                                    kind="server_error"))
        finally:
            log.info("%s %s %s key=%s status=%d %.1fms", request_id, scope["method"], route_of(scope),
                     scope["state"].get("key_id", "-"), status[0], 1000 * (time.perf_counter() - started))

    def _bounded(self, receive: Any, finished: list[bool]) -> Any:
        """``receive`` with the body held to its size and deadline; after the body, the client's own
        messages (a disconnect) pass through unchanged. ``finished[0]`` says when the body is all read."""
        deadline = time.monotonic() + self.body_timeout_s
        read = [0]

        async def bounded_receive() -> dict:
            if finished[0]:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                raise BodyTooSlow(self.body_timeout_s) from None
            if message["type"] == "http.request":
                read[0] += len(message.get("body", b""))
                if read[0] > self.max_body_bytes:
                    raise BodyTooLarge(self.max_body_bytes)
                finished[0] = not message.get("more_body", False)
            return message

        return bounded_receive


def where(exc: BaseException) -> str:
    """An exception's traceback without its message, which may quote the request."""
    return "".join(traceback.format_tb(exc.__traceback__))


def route_of(scope: dict) -> str:
    """The matched route's template (``/v1/models/{name}``), or a placeholder: never the raw path."""
    route = scope.get("route")
    return getattr(route, "path", None) or "(no such route)"


async def _reply(send: Any, error: ApiError) -> None:
    body = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((k.encode(), v.encode()) for k, v in error.headers.items())]
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
