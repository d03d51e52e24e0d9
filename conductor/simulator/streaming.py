"""A simulated worker's reply streamed as OpenAI chat-completion chunks (SSE, ending in ``data: [DONE]``).

The worker's latency is spread the way a real model spends it: ``first_token_share`` of it before the
first chunk (prefill and queueing), the rest evenly between chunks of about ``CHUNK_TOKENS`` tokens. A
streamed call therefore takes as long as the same call unstreamed, and a client sees the text grow.
With ``include_usage`` the last chunk before ``[DONE]`` carries ``usage`` and no choices, as OpenAI sends it.
An injected disconnect breaks the stream half-way (after some text was sent: the case a client cannot
retry); an injected malformed reply sends a chunk that is not JSON.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any, Optional

from fastapi.responses import Response

CHUNK_TOKENS = 16
CHARS_PER_TOKEN = 4
SIMULATED_STREAM_DROP = "simulated stream dropped mid-way"


def chunks_of(text: str, size_chars: int = CHUNK_TOKENS * CHARS_PER_TOKEN) -> list[str]:
    return [text[i:i + size_chars] for i in range(0, len(text), size_chars)] or [""]


class StreamedReply(Response):
    def __init__(self, *, model: str, text: str, finish_reason: str, usage: dict[str, Any], latency_s: float,
                 first_token_share: float, include_usage: bool, headers: Optional[dict[str, str]] = None,
                 fault: Optional[str] = None):
        super().__init__(media_type="text/event-stream", headers=headers)
        self.model, self.text, self.finish_reason, self.usage = model, text, finish_reason, usage
        self.latency_s, self.first_token_share = latency_s, first_token_share
        self.include_usage, self.fault = include_usage, fault
        self.completion_id = f"chatcmpl-{uuid.uuid4().hex[:24]}"

    def _chunk(self, delta: dict[str, Any], finish_reason: Optional[str] = None) -> bytes:
        body = {"id": self.completion_id, "object": "chat.completion.chunk", "created": int(time.time()),
                "model": self.model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]}
        return f"data: {json.dumps(body)}\n\n".encode()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = [(k, v) for k, v in self.raw_headers if k != b"content-length"]  # Response set it for b""
        await send({"type": "http.response.start", "status": 200, "headers": headers})

        async def emit(data: bytes) -> None:
            await send({"type": "http.response.body", "body": data, "more_body": True})

        pieces = chunks_of(self.text)
        await asyncio.sleep(self.latency_s * self.first_token_share)
        between = self.latency_s * (1 - self.first_token_share) / len(pieces)
        await emit(self._chunk({"role": "assistant", "content": ""}))
        if self.fault == "malformed":
            await emit(b'data: {"id": "chatcmpl-broken", "choices": [\n\n')
        for index, piece in enumerate(pieces):
            if self.fault == "disconnect" and index >= len(pieces) // 2:
                raise ConnectionAbortedError(SIMULATED_STREAM_DROP)
            await emit(self._chunk({"content": piece}))
            if between > 0:
                await asyncio.sleep(between)
        await emit(self._chunk({}, self.finish_reason))
        if self.include_usage:
            body = {"id": self.completion_id, "object": "chat.completion.chunk", "created": int(time.time()),
                    "model": self.model, "choices": [], "usage": self.usage}
            await emit(f"data: {json.dumps(body)}\n\n".encode())
        await send({"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False})
