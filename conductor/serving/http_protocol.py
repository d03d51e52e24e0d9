"""uvicorn's HTTP protocol with a header timeout and a cap on connections still sending headers, which
uvicorn itself lacks. A connection that opens and sends nothing, or trickles a request's headers, is
closed ``header_timeout_s`` after it opened or after the request's first byte. (uvicorn's keep-alive timer
only runs between requests, and restarts on every byte received.) At most ``max_pending`` connections may
be waiting for their headers at once, none of them authenticated yet (the key is a header): past that, the
one waiting longest is closed, once it has waited ``evictable_after_s``. A client's headers arrive in
milliseconds, so a flood of slow sockets evicts its own, not the requests of others, and a burst of real
clients (200 connecting at once, whose headers the event loop has not read yet) evicts nobody; uvicorn's
``limit_concurrency`` (a 503) caps the rest. A request line and headers of more than ``MAX_HEADER_BYTES``
close the connection (uvicorn would keep copying a growing URL, quadratic in its length). A request that
is not HTTP gets its 400 in OpenAI's shape. The parsing stays httptools', through uvicorn's own protocol
class; only these are added.

The body's own timeout and size are the ASGI layer's (conductor/serving/request_guard.py). On Ray Serve
and KubeRay the HTTP server is Ray's proxy: there these limits are the proxy's or the ingress's settings
(docs in the README's serving section).
"""

from __future__ import annotations

import asyncio
import json
from collections import OrderedDict
from typing import Any, ClassVar, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

MAX_HEADER_BYTES = 64 * 1024


class _HeaderTimeoutProtocol(HttpToolsProtocol):
    header_timeout_s: ClassVar[float] = 10.0
    max_pending: ClassVar[int] = 256
    evictable_after_s: ClassVar[float] = 1.0
    pending: ClassVar[OrderedDict]  # the server's connections awaiting headers, oldest first (per class)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.header_timer: Optional[asyncio.TimerHandle] = None
        self.header_bytes = 0
        super().connection_made(transport)
        self._arm_header_timer()

    def data_received(self, data: bytes) -> None:
        """Counted only while the headers are incomplete after a read: a read that completes them may
        carry a large body with it. A growing request line is cut within one read of the limit."""
        super().data_received(data)
        if self.header_timer is not None:  # still no complete request line and headers
            self.header_bytes += len(data)
            if self.header_bytes > MAX_HEADER_BYTES:
                self._close_waiting()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.header_bytes = 0
        if self.cycle is None or self.cycle.response_complete:  # a pipelined request waits behind one in flight
            self._arm_header_timer()

    def send_400_response(self, msg: str) -> None:
        body = json.dumps({"error": {"message": msg, "type": "invalid_request_error", "param": None,
                                     "code": "invalid_http"}}).encode()
        self.transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
                             b"content-length: " + str(len(body)).encode() + b"\r\nconnection: close\r\n\r\n" + body)
        self.transport.close()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(self.header_timeout_s, self._close_waiting)
            self.waiting_since = self.loop.time()
            self.pending[self] = None
            while len(self.pending) > self.max_pending:
                oldest = next(iter(self.pending))
                if self.loop.time() - oldest.waiting_since < self.evictable_after_s:
                    break  # a burst of new connections, not slow ones
                oldest._close_waiting()

    def _cancel_header_timer(self) -> None:
        self.pending.pop(self, None)
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _close_waiting(self) -> None:
        self._cancel_header_timer()
        if not self.transport.is_closing():
            self.transport.close()


def header_timeout_protocol(header_timeout_s: float, max_pending: int, evictable_after_s: float = 1.0) -> Any:
    """The protocol class to pass as ``uvicorn.run(..., http=...)``: one per server, with its own count."""
    return type("HeaderTimeoutProtocol", (_HeaderTimeoutProtocol,),
                {"header_timeout_s": header_timeout_s, "max_pending": max_pending,
                 "evictable_after_s": evictable_after_s, "pending": OrderedDict()})
