"""A small OpenAI-compatible chat server on 127.0.0.1 whose answer to each request the test decides, for
provider behaviours the simulator does not have (refusals, a reasoning model's parameter rules, a server that
gives up mid-reply, a stream cut short, a body or header sent raw). It keeps every request body."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Union


@dataclass(frozen=True)
class Streamed:
    """A streamed answer: each chunk an SSE event, then ``[DONE]`` unless the stream is cut before it."""

    chunks: tuple[dict, ...]
    done: bool = True


@dataclass(frozen=True)
class Raw:
    """An answer sent as it is, with headers of its own: what no well-behaved server would send."""

    body: bytes
    headers: tuple[tuple[str, str], ...] = (("Content-Type", "application/json"),)


Reply = Callable[[dict], tuple[int, Union[dict, Streamed, Raw]]]  # request body -> (HTTP status, what it answers)


def completion(model: str, content: Optional[str], finish: str = "stop", refusal: Optional[str] = None,
               prompt_tokens: int = 5, completion_tokens: int = 2) -> dict[str, Any]:
    """A chat completion as OpenAI writes one."""
    return {"id": "x", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content, "refusal": refusal}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


def chunk(model: str, content: Optional[str] = None, finish: Optional[str] = None,
          usage: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """One streamed chunk as OpenAI writes one (``usage`` alone, with no choices, for the last)."""
    choices = [] if usage else [{"index": 0, "delta": {"content": content} if content else {},
                                 "finish_reason": finish}]
    return {"id": "x", "object": "chat.completion.chunk", "created": 0, "model": model, "choices": choices,
            "usage": usage}


class ReplyServer:
    def __init__(self, reply: Reply):
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                status, answer = reply(body)
                if isinstance(answer, Streamed):
                    events = [f"data: {json.dumps(chunk)}\n\n" for chunk in answer.chunks]
                    data = "".join(events + (["data: [DONE]\n\n"] if answer.done else [])).encode()
                    headers: tuple[tuple[str, str], ...] = (("Content-Type", "text/event-stream"),)
                elif isinstance(answer, Raw):
                    data, headers = answer.body, answer.headers
                else:
                    data, headers = json.dumps(answer).encode(), (("Content-Type", "application/json"),)
                self.send_response(status)
                for name, value in headers:
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                """A client that timed out and left (what a slow answer tests) is not an error here."""
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.http = Server(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.http.server_port}/v1"

    @property
    def requests(self) -> int:
        return len(self.bodies)

    def close(self) -> None:
        self.http.shutdown()
