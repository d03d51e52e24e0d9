"""The HTTP endpoint: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/responses``, ``GET /health``.

Per request, in order: the request guard (conductor/serving/request_guard.py: a request id, the body's
declared size), the bearer key (401), the key's rate limit (429 + ``Retry-After``), the body (413 or 408
while it is read; 400 naming the field or the parameter), the model (404), the request's workers and cost
cap (400), then the answer, under ``serve.limits.request_timeout_s`` (504). Every error is in OpenAI's
shape, unknown routes and methods included, and a 5xx is never a client's mistake. A streamed request
opens its stream only after all of that passed; a client that goes away cancels the workflow (no more
spending). Log lines carry the request id, the route, the key's id (never the key), status and latency.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Any, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from conductor.serve_config import ServeConfig
from conductor.serving.api_errors import ApiError, from_validation
from conductor.serving.api_keys import KeyLimiter, KeyRing, RequestLimiter
from conductor.serving.api_schema import ChatCompletionRequest, ResponsesRequest
from conductor.serving.json_body import parse_json_body
from conductor.serving.openai_format import DONE, ChatFormat, ResponsesFormat
from conductor.serving.orchestrator import Orchestrator, ServeRequest
from conductor.serving.request_guard import RequestGuard, where

log = logging.getLogger("conductor.serve")
INLINE_BODY_BYTES = 64 * 1024  # larger bodies are parsed and validated off the event loop


class _Events:
    """Progress and answer text of a streamed request, queued for the stream writer."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue = asyncio.Queue()

    def progress(self, event: dict[str, Any]) -> None:
        self.queue.put_nowait(("progress", event))

    def answer_delta(self, text: str) -> None:
        self.queue.put_nowait(("delta", text))


def create_app(orchestrator: Orchestrator, serve: ServeConfig, limiter: Optional[RequestLimiter] = None) -> FastAPI:
    """``limiter``: the per-key buckets, if not this process's own (Ray Serve's replicas share one)."""
    keys, limiter = KeyRing(serve.auth), limiter or KeyLimiter(serve.limits)
    timeout_s = serve.limits.request_timeout_s
    app = FastAPI(title="Conductor", docs_url=None, redoc_url=None, openapi_url=None)
    created = int(time.time())

    def error_response(exc: ApiError) -> JSONResponse:
        return JSONResponse(exc.body(), exc.status, headers=exc.headers)

    app.add_middleware(RequestGuard, max_body_bytes=serve.limits.max_body_bytes,
                       body_timeout_s=serve.limits.body_timeout_s)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> JSONResponse:
        return error_response(exc)

    @app.exception_handler(HTTPException)
    async def no_route(request: Request, exc: HTTPException) -> JSONResponse:
        """An unknown route or a wrong method, in OpenAI's words and shape (the path is not echoed)."""
        if exc.status_code == 405:
            return error_response(ApiError(405, f"Invalid method for this URL: {request.method[:16]}.",
                                           code="method_not_allowed", headers=dict(exc.headers or {})))
        return error_response(ApiError(exc.status_code, f"Invalid URL ({request.method[:16]} on an unknown route).",
                                       code="unknown_url" if exc.status_code == 404 else None))

    async def admit(request: Request) -> None:
        request.state.key_id = keys.identify(request.headers.get("authorization"))
        await limiter.admit(request.state.key_id)

    async def body_of(request: Request, schema: Any) -> Any:
        raw = await request.body()  # held to max_body_bytes and body_timeout_s by the guard
        if len(raw) > INLINE_BODY_BYTES:
            return await asyncio.to_thread(parsed_body, raw, schema)
        return parsed_body(raw, schema)

    def parsed_body(raw: bytes, schema: Any) -> Any:
        data = parse_json_body(raw)
        try:
            parsed = schema.model_validate(data)
        except ValidationError as exc:
            raise from_validation(exc) from None
        parsed.refuse_unsupported()
        return parsed

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        await admit(request)
        return {"object": "list", "data": [model_card(name) for name in orchestrator.models]}

    @app.get("/v1/models/{name}")
    async def model(name: str, request: Request) -> dict[str, Any]:
        await admit(request)
        orchestrator.model(name)
        return model_card(name)

    def model_card(name: str) -> dict[str, Any]:
        return {"id": name, "object": "model", "created": created, "owned_by": "conductor"}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        await admit(request)
        body: ChatCompletionRequest = await body_of(request, ChatCompletionRequest)
        served = ServeRequest(orchestrator.model(body.model), body.question(), body.conductor, body.answer_max_tokens,
                              body.answer_sampling, question_param="messages")
        form = ChatFormat(body.model)
        if not body.stream:
            answer = await answered(orchestrator.answer(served), request)
            return JSONResponse(form.completion(answer.text, answer.usage, trace_if(body, answer.trace),
                                                answer.finish_reason))
        events = _Events()
        run = orchestrator.start(served, events)
        include_usage = bool(body.stream_options and body.stream_options.include_usage)

        async def stream() -> AsyncIterator[bytes]:
            yield form.chunk({"role": "assistant", "content": ""})
            async for kind, item in drain(run.go(), events):
                if kind == "progress":
                    yield form.chunk({}, conductor_event=item)
                elif kind == "delta":
                    yield form.chunk({"content": item})
                elif kind == "error":
                    yield form.chunk({}, "stop", error=item.body()["error"])
                else:
                    if not item.streamed:
                        yield form.chunk({"content": item.text})
                    extra = {"conductor_trace": item.trace} if body.conductor.trace else {}
                    yield form.chunk({}, item.finish_reason, **extra)
                    if include_usage:
                        yield form.usage_chunk(item.usage)
            yield DONE

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    @app.post("/v1/responses")
    async def responses(request: Request) -> Response:
        await admit(request)
        body: ResponsesRequest = await body_of(request, ResponsesRequest)
        served = ServeRequest(orchestrator.model(body.model), body.question(), body.conductor, body.answer_max_tokens,
                              body.answer_sampling, question_param="input")
        form = ResponsesFormat(body.model, body.instructions)
        if not body.stream:
            answer = await answered(orchestrator.answer(served), request)
            return JSONResponse(form.finished(answer.text, answer.usage, trace_if(body, answer.trace),
                                              answer.finish_reason))
        events = _Events()
        run = orchestrator.start(served, events)

        async def stream() -> AsyncIterator[bytes]:
            for event in form.opening():
                yield event
            text_open = False
            async for kind, item in drain(run.go(), events):
                if kind == "progress":
                    yield form.event("conductor.progress", event=item)
                    continue
                if not text_open and kind in ("delta", "done"):
                    for event in form.text_opening():
                        yield event
                    text_open = True
                if kind == "delta":
                    yield form.delta(item)
                elif kind == "error":
                    yield form.event("response.failed", response=dict(form.response("failed"),
                                                                      error=item.body()["error"]))
                else:
                    if not item.streamed:
                        yield form.delta(item.text)
                    for event in form.closing(item.text, item.usage, trace_if(body, item.trace), item.finish_reason):
                        yield event
            yield DONE

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    def trace_if(body: Union[ChatCompletionRequest, ResponsesRequest], trace: dict[str, Any]) -> Optional[dict]:
        return trace if body.conductor.trace else None

    async def answered(work: Any, request: Request) -> Any:
        """``work``'s result within the timeout; cancelled when the client leaves first. Nothing else would
        stop it, and the official client retries a call it timed out on, so a run left going is paid for
        again at each retry."""
        task = asyncio.ensure_future(asyncio.wait_for(work, timeout_s))
        gone = asyncio.ensure_future(client_gone(request))
        try:
            await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for running in (task, gone):
                if not running.done():
                    running.cancel()
                    with contextlib.suppress(BaseException):
                        await running
        if task.cancelled():
            raise ClientDisconnect()  # the guard logs it as 499: nobody is left to answer
        try:
            return task.result()
        except TimeoutError:
            raise ApiError(504, f"The request took longer than {timeout_s:g}s.", kind="server_error",
                           code="timeout") from None

    async def client_gone(request: Request) -> None:
        """Returns when the client disconnects (the body is read: what comes next can only be that)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def drain(work: Any, events: _Events) -> AsyncIterator[tuple[str, Any]]:
        """The run's events as they come, then ``("done", answer)`` or ``("error", ApiError)``. Leaving early
        (the client went away) cancels the run."""
        task = asyncio.ensure_future(asyncio.wait_for(work, timeout_s))
        getter: Optional[asyncio.Future] = None
        try:
            while True:
                getter = asyncio.ensure_future(events.queue.get())
                await asyncio.wait({getter, task}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    yield getter.result()
                    continue
                getter.cancel()
                while not events.queue.empty():
                    yield events.queue.get_nowait()
                break
            try:
                yield "done", task.result()
            except ApiError as exc:
                yield "error", exc
            except TimeoutError:
                yield "error", ApiError(504, f"The request took longer than {timeout_s:g}s.", kind="server_error",
                                        code="timeout")
            except Exception as exc:  # logged by type and place: its message may quote the request
                log.error("a streamed request failed: %s\n%s", type(exc).__name__, where(exc))
                yield "error", ApiError(500, "The server had an error processing the request.", kind="server_error")
        finally:
            if getter is not None and not getter.done():
                getter.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task

    return app
