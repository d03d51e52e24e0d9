"""What a call sends, as the provider takes it: OpenAI's reasoning models (o-series, gpt-5) refuse
``max_tokens`` and any temperature or top_p but their default, so a worker can name its reply limit
``max_completion_tokens`` and send no sampling (``sampling.token_limit_param``, ``sampling.fixed_sampling``).
Against a small HTTP server that refuses as OpenAI does, through the real provider client and openai client."""

from __future__ import annotations

import asyncio
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from conductor.config import ProviderSpec, SamplingParams, WorkerSpec
from conductor.pool import WorkerCallError
from conductor.provider_client import ProviderClient


class ReasoningModelServer:
    """Answers like OpenAI's reasoning models: a 400 naming the parameter for ``max_tokens``, a temperature
    other than 1 or a top_p; an answer otherwise. Keeps each request body."""

    def __init__(self):
        self.bodies: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                refused = ("max_tokens" if "max_tokens" in body else
                           "temperature" if body.get("temperature", 1) != 1 else
                           "top_p" if "top_p" in body else None)
                if refused:
                    status, reply = 400, {"error": {"message": f"Unsupported parameter: '{refused}'",
                                                    "type": "invalid_request_error", "param": refused,
                                                    "code": "unsupported_parameter"}}
                else:
                    status, reply = 200, {
                        "id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": "42"}}],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}}
                data = json.dumps(reply).encode()
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


@pytest.fixture
def server():
    running = ReasoningModelServer()
    yield running
    running.http.shutdown()


def call(server, sampling, params=None):
    spec = ProviderSpec(id="openai", base_url=server.base_url, max_retries=0)
    client = ProviderClient(spec, [WorkerSpec(id="gpt-5", description="d", provider="openai", sampling=sampling)])

    async def main():
        try:
            return await client.chat("gpt-5", [{"role": "user", "content": "6*7?"}], params)
        finally:
            await client.close()

    return asyncio.run(asyncio.wait_for(main(), 30))


def test_a_reasoning_model_gets_its_reply_limit_by_its_name_and_no_sampling(server):
    sampling = SamplingParams(max_tokens=2048, token_limit_param="max_completion_tokens", fixed_sampling=True)
    assert call(server, sampling).text == "42"
    assert call(server, sampling, {"temperature": 0.7, "max_tokens": 64}).text == "42"  # e.g. the endpoint's answer
    first, second = server.bodies
    assert first["max_completion_tokens"] == 2048 and second["max_completion_tokens"] == 64
    assert not {"max_tokens", "temperature", "top_p"} & (set(first) | set(second))


def test_without_them_the_provider_refuses_at_once_naming_the_parameter(server):
    with pytest.raises(WorkerCallError) as failure:
        call(server, SamplingParams())
    assert failure.value.kind == "bad_request" and "max_tokens" in failure.value.message
    assert len(server.bodies) == 1  # a 400 is not retried
