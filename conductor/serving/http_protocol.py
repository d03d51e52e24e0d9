"""uvicorn's HTTP protocol with a header timeout, which uvicorn itself lacks: a connection that opens and
sends nothing, or trickles a request's headers, is closed ``header_timeout_s`` after it opened or after
the request's first byte. (uvicorn's keep-alive timer only runs between requests, and restarts on every
byte received.) The parsing stays httptools', through uvicorn's own protocol class; only a timer is added.

The body's own timeout and size are the ASGI layer's (conductor/serving/request_guard.py). On Ray Serve
and KubeRay the HTTP server is Ray's proxy: there these limits are the proxy's or the ingress's settings
(docs in the README's serving section).
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


class _HeaderTimeoutProtocol(HttpToolsProtocol):
    header_timeout_s: float = 10.0

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
            self.header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_too_slow(self) -> None:
        self.header_timer = None
        if not self.transport.is_closing():
            self.transport.close()


def header_timeout_protocol(header_timeout_s: float) -> Any:
    """The protocol class to pass as ``uvicorn.run(..., http=...)``."""
    return type("HeaderTimeoutProtocol", (_HeaderTimeoutProtocol,), {"header_timeout_s": header_timeout_s})
