"""A small OpenAI-compatible chat server on 127.0.0.1 whose answer to each request the test decides, for
provider behaviours the simulator does not have (refusals, a reasoning model's parameter rules). It keeps
every request body."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

Reply = Callable[[dict], tuple[int, dict]]  # request body -> (HTTP status, JSON body)


def completion(model: str, content: Optional[str], finish: str = "stop", refusal: Optional[str] = None,
               prompt_tokens: int = 5, completion_tokens: int = 2) -> dict[str, Any]:
    """A chat completion as OpenAI writes one."""
    return {"id": "x", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": finish,
                         "message": {"role": "assistant", "content": content, "refusal": refusal}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens}}


class ReplyServer:
    def __init__(self, reply: Reply):
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                status, answer = reply(body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.http.server_port}/v1"

    @property
    def requests(self) -> int:
        return len(self.bodies)

    def close(self) -> None:
        self.http.shutdown()
