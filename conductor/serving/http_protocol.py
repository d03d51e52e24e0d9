"""uvicorn's HTTP protocol with a header timeout and a cap on connections still sending headers, which
uvicorn itself lacks. A connection that opens and sends nothing, or trickles a request's headers, is
closed ``header_timeout_s`` after it opened or after the request's first byte. (uvicorn's keep-alive timer
only runs between requests, and restarts on every byte received.) At most ``max_pending`` connections may
be waiting for their headers at once, none of them authenticated yet (the key is a header): past that, the
one waiting longest is closed. A client's headers arrive in milliseconds, so a flood of slow sockets
evicts its own, not the requests of others; uvicorn's ``limit_concurrency`` (a 503) caps the rest. The
parsing stays httptools', through uvicorn's own protocol class; only the timer and the cap are added.

The body's own timeout and size are the ASGI layer's (conductor/serving/request_guard.py). On Ray Serve
and KubeRay the HTTP server is Ray's proxy: there these limits are the proxy's or the ingress's settings
(docs in the README's serving section).
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import Any, ClassVar, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _HeaderTimeoutProtocol(HttpToolsProtocol):
    header_timeout_s: ClassVar[float] = 10.0
    max_pending: ClassVar[int] = 256
    pending: ClassVar[OrderedDict]  # the server's connections awaiting headers, oldest first (per class)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self.header_timer: Optional[asyncio.TimerHandle] = None
        super().connection_made(transport)
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(self.header_timeout_s, self._close_waiting)
            self.pending[self] = None
            while len(self.pending) > self.max_pending:
                oldest, _ = self.pending.popitem(last=False)
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


def header_timeout_protocol(header_timeout_s: float, max_pending: int) -> Any:
    """The protocol class to pass as ``uvicorn.run(..., http=...)``: one per server, with its own count."""
    return type("HeaderTimeoutProtocol", (_HeaderTimeoutProtocol,),
                {"header_timeout_s": header_timeout_s, "max_pending": max_pending, "pending": OrderedDict()})
