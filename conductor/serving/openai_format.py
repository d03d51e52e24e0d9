"""Response bodies and stream events in OpenAI's shapes, for chat completions and responses.

Extensions ride in fields standard clients ignore: ``conductor_event`` on a chat chunk (workflow progress:
the workflow written, each step started and finished, a fallback), events of type ``conductor.progress``
in a responses stream, ``conductor_trace`` on a response when the request asked for it, and the usage
breakdown (``conductor_tokens``, ``worker_tokens``, ``orchestration_tokens``, ``cost_usd``...) inside
``usage``. A chat stream ends in ``data: [DONE]``, and so does a responses stream (a client stops there).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Optional

from conductor.serving.served_trace import Usage

DONE = b"data: [DONE]\n\n"
INCOMPLETE_REASON = {"length": "max_output_tokens", "content_filter": "content_filter"}  # finish -> responses


def sse(body: dict[str, Any], event: Optional[str] = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(body, separators=(',', ':'))}\n\n".encode()


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def chat_usage(usage: Usage) -> dict[str, Any]:
    return {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens, **usage.breakdown()}


def responses_usage(usage: Usage) -> dict[str, Any]:
    return {"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
            "total_tokens": usage.prompt_tokens + usage.completion_tokens,
            "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0},
            **usage.breakdown()}


class ChatFormat:
    """One chat completion's id, model and creation time, shared by its body or its chunks."""

    def __init__(self, model: str):
        self.id, self.model, self.created = new_id("chatcmpl-"), model, int(time.time())

    def completion(self, text: str, usage: Usage, trace: Optional[dict[str, Any]],
                   finish_reason: str = "stop") -> dict[str, Any]:
        body = {"id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                             "finish_reason": finish_reason}],
                "usage": chat_usage(usage), "system_fingerprint": None}
        if trace is not None:
            body["conductor_trace"] = trace
        return body

    def chunk(self, delta: dict[str, Any], finish_reason: Optional[str] = None, **extra: Any) -> bytes:
        return sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
                    **extra})

    def usage_chunk(self, usage: Usage) -> bytes:
        return sse({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
                    "choices": [], "usage": chat_usage(usage)})


class ResponsesFormat:
    """One response's ids and its stream events, numbered in order (``sequence_number``)."""

    def __init__(self, model: str, instructions: Optional[str]):
        self.id, self.message_id = new_id("resp_"), new_id("msg_")
        self.model, self.instructions, self.created = model, instructions, int(time.time())
        self.sequence = 0

    def response(self, status: str, text: Optional[str] = None, usage: Optional[Usage] = None,
                 trace: Optional[dict[str, Any]] = None, finish_reason: str = "stop") -> dict[str, Any]:
        incomplete = INCOMPLETE_REASON.get(finish_reason) if status == "incomplete" else None
        output = [] if text is None else [self.message(text, status)]
        body = {"id": self.id, "object": "response", "created_at": self.created, "status": status,
                "model": self.model, "output": output, "instructions": self.instructions, "error": None,
                "incomplete_details": {"reason": incomplete} if incomplete else None, "metadata": {},
                "parallel_tool_calls": False, "tool_choice": "none",
                "tools": [], "temperature": None, "top_p": None,
                "usage": responses_usage(usage) if usage is not None else None}
        if trace is not None:
            body["conductor_trace"] = trace
        return body

    def finished(self, text: str, usage: Usage, trace: Optional[dict[str, Any]], finish_reason: str) -> dict[str, Any]:
        """The final response: ``incomplete`` (with its reason) when the answer was cut, else ``completed``."""
        status = "incomplete" if finish_reason in INCOMPLETE_REASON else "completed"
        return self.response(status, text, usage, trace, finish_reason)

    def message(self, text: str, status: str) -> dict[str, Any]:
        content = [{"type": "output_text", "text": text, "annotations": []}] if status != "in_progress" or text else []
        return {"type": "message", "id": self.message_id, "status": status, "role": "assistant", "content": content}

    def event(self, kind: str, **fields: Any) -> bytes:
        body = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return sse(body, event=kind)

    def opening(self) -> list[bytes]:
        return [self.event("response.created", response=self.response("in_progress")),
                self.event("response.in_progress", response=self.response("in_progress"))]

    def text_opening(self) -> list[bytes]:
        return [self.event("response.output_item.added", output_index=0,
                           item={"type": "message", "id": self.message_id, "status": "in_progress",
                                 "role": "assistant", "content": []}),
                self.event("response.content_part.added", item_id=self.message_id, output_index=0, content_index=0,
                           part={"type": "output_text", "text": "", "annotations": []})]

    def delta(self, text: str) -> bytes:
        return self.event("response.output_text.delta", item_id=self.message_id, output_index=0, content_index=0,
                          delta=text, logprobs=[])

    def closing(self, text: str, usage: Usage, trace: Optional[dict[str, Any]], finish_reason: str) -> list[bytes]:
        part = {"type": "output_text", "text": text, "annotations": []}
        final = self.finished(text, usage, trace, finish_reason)
        return [self.event("response.output_text.done", item_id=self.message_id, output_index=0, content_index=0,
                           text=text, logprobs=[]),
                self.event("response.content_part.done", item_id=self.message_id, output_index=0, content_index=0,
                           part=part),
                self.event("response.output_item.done", output_index=0, item=final["output"][0]),
                self.event(f"response.{final['status']}", response=final)]
