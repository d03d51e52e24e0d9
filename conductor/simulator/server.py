"""The simulated worker server: OpenAI ``/v1/chat/completions`` and ``/v1/models`` for the preset's
workers and its judge (conductor/simulator/judge.py), plus ``/sim/stats`` (counts and a request log for tests
and benchmarks).

Per request, in order: the arrival stamp (taken by an ASGI middleware as soon as the request line and
headers are parsed, before routing and before the body is read, as a provider's rate limiter counts it),
auth (if ``api_key_env`` is set), body validation, the server-side rate limit (sliding window
(t - W, t] over accepted arrivals; 429 with ``Retry-After`` and ``retry-after-ms``), one seeded fault draw
(429, 5xx, hang, dropped connection, malformed JSON), the worker's latency, then the oracle's answer
with token usage (``max_tokens`` truncates, ``finish_reason="length"``), streamed as chunks when the
request asks (``stream: true``; conductor/simulator/streaming.py). Each request-log entry's ``t``
is its arrival (wall clock), whatever its status.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import hmac
import logging
import math
import os
import random
import socket
import threading
import time
import urllib.request
import uuid
from typing import Any, Optional

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from conductor.config import SimulatorConfig
from conductor.simulator.judge import SimulatedJudge
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import SimPreset, load_preset
from conductor.simulator.streaming import SIMULATED_STREAM_DROP, StreamedReply

CHARS_PER_TOKEN = 4
REQUEST_LOG_LIMIT = 100_000
FAULT_KINDS = ("rate_limit", "server_error", "timeout", "disconnect", "malformed")


def count_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def _error(status: int, message: str, kind: str, headers: Optional[dict[str, str]] = None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "code": status}}, status, headers=headers)


class _DroppedConnection(Response):
    """Starts a 200 response, sends part of the body, then aborts: the client sees a broken connection."""

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"4096")]})
        await send({"type": "http.response.body", "body": b'{"id": "chatcmpl-', "more_body": True})
        raise ConnectionAbortedError(SIMULATED_DROP)


SIMULATED_DROP = "simulated dropped connection"


class _HideSimulatedDrops(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, asyncio.CancelledError):
            return False  # a hung (injected timeout) request cancelled by our own shutdown
        if "timeout graceful shutdown exceeded" in record.getMessage():
            return False
        return not (isinstance(exc, ConnectionAbortedError) and str(exc) in (SIMULATED_DROP, SIMULATED_STREAM_DROP))


ARRIVAL = "conductor.arrival"  # scope key: (wall clock, monotonic clock) when the request arrived


class _StampArrival:
    """Pure ASGI middleware: stamp each HTTP request on arrival, before anything awaits its body."""

    def __init__(self, app: Any):
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            scope[ARRIVAL] = (time.time(), time.monotonic())
        await self.app(scope, receive, send)


class SimulatorState:
    def __init__(self, config: SimulatorConfig, preset: SimPreset):
        self.config = config
        self.preset = preset
        self.oracle = Oracle(preset, config)
        self.judge = SimulatedJudge(preset.judge, self.oracle, config.seed) if preset.judge else None
        self.workers = {w.name: w for w in (*preset.workers, *([preset.judge] if preset.judge else []))}
        self.rng = random.Random(config.seed)
        self.accepted: collections.deque[float] = collections.deque()  # accepted arrivals in the window, sorted
        self.log: collections.deque = collections.deque(maxlen=REQUEST_LOG_LIMIT)
        self.counts = collections.Counter()
        self.api_key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""

    def admit(self, now: float) -> Optional[float]:
        """None if the request fits the server's window, else seconds until a slot frees."""
        if self.config.rpm is None:
            return None
        while self.accepted and self.accepted[0] <= now - self.config.rate_window_s:
            self.accepted.popleft()
        if len(self.accepted) >= self.config.rpm:
            return self.accepted[0] + self.config.rate_window_s - now
        bisect.insort(self.accepted, now)  # handlers can reach here out of arrival order
        return None

    def limit_headers(self, now: float) -> dict[str, str]:
        """OpenAI-style x-ratelimit-* headers describing the server-side request window."""
        if self.config.rpm is None or not self.config.rate_limit_headers:
            return {}
        reset = (self.accepted[0] + self.config.rate_window_s - now) if self.accepted else 0.0
        return {"x-ratelimit-limit-requests": str(self.config.rpm),
                "x-ratelimit-remaining-requests": str(max(0, self.config.rpm - len(self.accepted))),
                "x-ratelimit-reset-requests": f"{max(reset, 0.0):.3f}s"}

    def draw_fault(self) -> Optional[str]:
        faults, point, edge = self.config.faults, self.rng.random(), 0.0
        for kind in FAULT_KINDS:
            edge += getattr(faults, kind)
            if point < edge:
                return kind
        return None

    def latency_s(self, worker_name: str) -> float:
        worker = self.workers[worker_name]
        if self.config.fixed_latency_ms is not None:
            return self.config.fixed_latency_ms / 1000.0
        if self.config.latency_scale == 0 or worker.latency_ms <= 0:
            return 0.0
        sigma = worker.latency_sigma
        mu = math.log(worker.latency_ms / 1000.0) - sigma ** 2 / 2
        return self.rng.lognormvariate(mu, sigma) * self.config.latency_scale

    def record(self, worker: Optional[str], status: int, outcome: str, call_id: Optional[str] = None,
               arrived: Optional[float] = None) -> None:
        self.counts[outcome] += 1
        self.log.append({"t": time.time() if arrived is None else arrived, "worker": worker, "status": status,
                         "outcome": outcome, "call_id": call_id})


def _sample_seed(body: dict[str, Any]) -> Optional[int]:
    """A request's ``seed`` asks for an independent sample (see the oracle); none, or a non-integer, asks
    for the worker's one answer."""
    seed = body.get("seed")
    return seed if type(seed) is int else None


def _retry_after_headers(seconds: float) -> dict[str, str]:
    return {"retry-after": str(max(1, math.ceil(seconds))), "retry-after-ms": str(int(seconds * 1000))}


def create_app(config: SimulatorConfig, preset: Optional[SimPreset] = None) -> FastAPI:
    state = SimulatorState(config, preset or load_preset(config))
    app = FastAPI(title="Conductor simulated workers")
    app.state.sim = state
    app.add_middleware(_StampArrival)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "conductor-simulator"}
                                           for name in state.workers]}

    @app.get("/sim/stats")
    async def stats() -> dict[str, Any]:
        return {"counts": dict(state.counts), "requests": list(state.log), "preset": state.preset.name}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        arrived, now = request.scope.get(ARRIVAL) or (time.time(), time.monotonic())
        call_id = request.headers.get("x-conductor-call-id")

        def record(worker: Optional[str], status: int, outcome: str) -> None:
            state.record(worker, status, outcome, call_id, arrived)

        if state.api_key:
            supplied = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(supplied.encode(), state.api_key.encode()):
                record(None, 401, "unauthorized")
                return _error(401, "Incorrect API key provided.", "invalid_request_error")
        try:
            body = await request.json()
            model, messages = body["model"], body["messages"]
            if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
                raise ValueError("messages must be a list of {role, content}")
            max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or 4096)
        except (ValueError, KeyError, TypeError) as exc:
            record(None, 400, "bad_request")
            return _error(400, f"Invalid request: {exc}", "invalid_request_error")
        prompt_tokens = sum(count_tokens(str(m.get("content") or "")) + 4 for m in messages)
        if prompt_tokens > config.max_context_tokens:
            record(model, 400, "context_length")
            return _error(400, f"This model's maximum context length is {config.max_context_tokens} tokens; "
                               f"the messages have {prompt_tokens}.", "invalid_request_error")
        if model not in state.workers:
            record(model, 404, "unknown_model")
            return _error(404, f"The model '{model}' does not exist.", "invalid_request_error")
        wait = state.admit(now)
        if wait is not None:
            record(model, 429, "rate_limited")
            return _error(429, "Rate limit reached for requests.", "rate_limit_error",
                          {**_retry_after_headers(max(wait, 0.001)), **state.limit_headers(now)})
        fault = state.draw_fault()
        if fault == "rate_limit":
            record(model, 429, "fault_rate_limit")
            return _error(429, "Rate limit reached (injected).", "rate_limit_error",
                          _retry_after_headers(config.retry_after_s))
        if fault == "server_error":
            status = state.rng.choice([500, 502, 503])
            record(model, status, "fault_server_error")
            return _error(status, "The server had an error (injected).", "server_error")
        streamed = bool(body.get("stream"))
        if fault == "disconnect" and not streamed:
            record(model, 200, "fault_disconnect")
            return _DroppedConnection()
        if fault == "malformed" and not streamed:
            record(model, 200, "fault_malformed")
            return Response('{"id": "chatcmpl-broken", "choices": [', media_type="application/json")
        latency = state.latency_s(model) + (config.faults.hang_s if fault == "timeout" else 0.0)
        if not streamed:
            await asyncio.sleep(latency)
        judge = state.judge if state.judge is not None and model == state.judge.spec.name else None
        reply = (judge.reply(messages, _sample_seed(body)) if judge is not None
                 else state.oracle.answer(model, messages, _sample_seed(body)))
        text, completion_tokens, finish = reply.text, count_tokens(reply.text), "stop"
        if completion_tokens > max_tokens:
            text, completion_tokens, finish = text[: max_tokens * CHARS_PER_TOKEN], max_tokens, "length"
        reasoning_tokens = min(reply.reasoning_tokens, max(0, max_tokens - completion_tokens))
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens + reasoning_tokens,
                 "total_tokens": prompt_tokens + completion_tokens + reasoning_tokens,
                 "completion_tokens_details": {"reasoning_tokens": reasoning_tokens}}
        record(model, 200, f"fault_{fault}" if fault in ("timeout", "disconnect", "malformed") else "ok")
        if streamed:
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return StreamedReply(model=model, text=text, finish_reason=finish, usage=usage, latency_s=latency,
                                 first_token_share=config.first_token_share, include_usage=include_usage,
                                 headers=state.limit_headers(time.monotonic()), fault=fault)
        return JSONResponse(headers=state.limit_headers(time.monotonic()), content={
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": usage,
        })

    return app


class SimulatorServer:
    """The simulator on a real loopback socket, served by uvicorn in a background thread."""

    def __init__(self, config: SimulatorConfig, preset: Optional[SimPreset] = None):
        self.app = create_app(config, preset)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((config.host, config.port))
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", access_log=False,
                                                    timeout_graceful_shutdown=1))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def state(self) -> SimulatorState:
        return self.app.state.sim

    def __enter__(self) -> SimulatorServer:
        uvicorn_errors = logging.getLogger("uvicorn.error")
        if not any(isinstance(f, _HideSimulatedDrops) for f in uvicorn_errors.filters):
            uvicorn_errors.addFilter(_HideSimulatedDrops())
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("simulator server did not start")
            time.sleep(0.02)
        # Starlette builds its middleware stack on the first request, before the arrival stamp: do it now,
        # so that the first request is stamped as promptly as the rest.
        with urllib.request.urlopen(f"{self.base_url}/models", timeout=20) as response:
            response.read()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.sock.close()
