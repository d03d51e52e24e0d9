"""The app's answers to client mistakes and unusual input, in process (httpx's ASGI transport; a scripted
Conductor and pool, as in test_serve_orchestrator.py): every one a 4xx in OpenAI's shape, never a 5xx; a
truncated answer reported as such; a client that leaves, under real uvicorn. tests/test_serve_hostile.py
sends the same classes of input, and the transport cases, to the real server process."""

import asyncio
import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn

from conductor.serve_config import ServeConfig, ServedModel
from conductor.serving.app import create_app
from conductor.serving.json_body import MAX_DEPTH
from conductor.serving.request_guard import RequestGuard
from tests.test_serve_orchestrator import SOLVE_VERIFY, ContextPool, ScriptedConductor, orchestrator

ASK = [{"role": "user", "content": "What is 6 times 7?"}]


def app(*outputs, max_body_bytes=2**20, body_timeout_s=30.0):
    o = orchestrator(ScriptedConductor(*outputs), ContextPool(context_words=10**6))
    serve = ServeConfig(models=[ServedModel(name="mini", workers=["cheap", "mid"], max_steps=2)],
                        auth={"required": False},
                        limits={"max_body_bytes": max_body_bytes, "body_timeout_s": body_timeout_s})
    return create_app(o, serve)


def call(asgi, method, path, **kw):
    async def go():
        transport = httpx.ASGITransport(app=asgi)
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            return await client.request(method, path, **kw)
    return asyncio.run(go())


def openai_error(response, status, code=None, param=None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert code is None or error["code"] == code, error
    assert param is None or error["param"] == param, error
    return error


@pytest.mark.parametrize("raw,code,param", [
    (b'{"model": "mini", "messages": [{"role": "user", "content": "\\ud800 hi"}]}', "invalid_value",
     "messages[0].content"),
    (b'{"model": "mini", "messages": [{"role": "user", "content": "hi"}], "metadata": {"\\udfff": 1}}',
     "invalid_value", "metadata"),
    (b'{"model": "mini", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "invalid_json", None),
    (json.dumps({"model": "mini", "messages": ASK, "metadata": json.loads("[" * (MAX_DEPTH + 5) + "]" *
                                                                          (MAX_DEPTH + 5))}).encode(),
     "invalid_json", None),
    (b'{"model": "mini", "messages": ' + b"\xff\xfe" + b"}", "invalid_json", None),
    (b'["a list"]', "invalid_json", None),
])
def test_bodies_json_allows_but_text_does_not_are_400s(raw, code, param):
    openai_error(call(app(), "POST", "/v1/chat/completions", content=raw), 400, code, param)


@pytest.mark.parametrize("extra,code,param", [
    ({"stop": ["\n"]}, "unsupported_parameter", "stop"),
    ({"logprobs": True}, "unsupported_parameter", "logprobs"),
    ({"temperature": 2.5}, "invalid_value", "temperature"),
    ({"top_p": 1.5}, "invalid_value", "top_p"),
    ({"frobnicate": 1}, "unknown_parameter", "frobnicate"),
    ({"messages": [{"role": "user", "content": "hi", "colour": "red"}]}, "unknown_parameter", "messages[0].colour"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x"}}]}]},
     "unsupported_parameter", "messages[0].content[0].type"),
    ({"max_tokens": 10**30}, "invalid_value", "max_tokens"),
    ({"stream": "yes please"}, "invalid_value", "stream"),
])
def test_parameters_are_honoured_or_refused_by_name(extra, code, param):
    body = {"model": "mini", "messages": ASK, **extra}
    openai_error(call(app(SOLVE_VERIFY), "POST", "/v1/chat/completions", json=body), 400, code, param)


def test_responses_refuse_a_structured_output_format_and_other_input_items():
    asgi = app()
    error = openai_error(call(asgi, "POST", "/v1/responses", json={"model": "mini", "input": "hi", "text": {
        "format": {"type": "json_schema", "name": "x", "schema": {}}}}), 400, "unsupported_parameter", "text.format")
    assert "json_schema" in error["message"]
    item = {"type": "function_call_output", "call_id": "c", "output": "x"}
    openai_error(call(asgi, "POST", "/v1/responses", json={"model": "mini", "input": [item]}), 400,
                 "unsupported_parameter", "input[0].type")


def test_unknown_routes_and_methods_answer_in_openai_s_shape():
    asgi = app()
    error = openai_error(call(asgi, "GET", "/v1/engines/sk-not-echoed"), 404, "unknown_url")
    assert "sk-not-echoed" not in error["message"]
    openai_error(call(asgi, "GET", "/v1/chat/completions"), 405, "method_not_allowed")
    openai_error(call(asgi, "DELETE", "/v1/models"), 405)


def test_a_declared_or_streamed_body_over_the_limit_is_a_413_that_closes_the_connection():
    asgi = app(max_body_bytes=4096)
    response = call(asgi, "POST", "/v1/chat/completions", content=b"x" * 5000)
    openai_error(response, 413, "too_large")
    assert response.headers["connection"] == "close"

    async def chunks():
        for _ in range(10):
            yield b"x" * 1000
    openai_error(call(asgi, "POST", "/v1/chat/completions", content=chunks()), 413, "too_large")
    openai_error(call(asgi, "POST", "/v1/chat/completions", content=b"{}", headers={"content-length": "-4"}), 400)


def test_a_body_that_stops_arriving_is_a_408():
    async def stalls():
        yield b'{"model": "mini", '
        await asyncio.sleep(5)
        yield b"}"
    response = call(app(body_timeout_s=0.3), "POST", "/v1/chat/completions", content=stalls())
    openai_error(response, 408, "timeout")


def test_a_cut_answer_reports_length_in_chat_and_incomplete_in_responses():
    body = {"model": "mini", "messages": ASK, "max_tokens": 1}
    reply = call(app(SOLVE_VERIFY), "POST", "/v1/chat/completions", json=body).json()
    assert reply["choices"][0]["finish_reason"] == "length" and reply["choices"][0]["message"]["content"] == "mid"
    streamed = call(app(SOLVE_VERIFY), "POST", "/v1/chat/completions", json=dict(body, stream=True)).text
    finishes = [json.loads(line[6:])["choices"][0]["finish_reason"] for line in streamed.splitlines()
                if line.startswith("data: {") and json.loads(line[6:])["choices"]]
    assert finishes[-1] == "length"
    response = call(app(SOLVE_VERIFY), "POST", "/v1/responses",
                    json={"model": "mini", "input": "What is 6 times 7?", "max_output_tokens": 1}).json()
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    events = call(app(SOLVE_VERIFY), "POST", "/v1/responses", json={
        "model": "mini", "input": "What is 6 times 7?", "max_output_tokens": 1, "stream": True}).text
    kinds = [line[7:] for line in events.splitlines() if line.startswith("event: ")]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    whole = call(app(SOLVE_VERIFY), "POST", "/v1/responses", json={"model": "mini", "input": "What is 6 times 7?"})
    assert whole.json()["status"] == "completed"


def test_the_log_line_names_the_route_never_the_path_or_its_query(caplog):
    asgi = app()
    with caplog.at_level("INFO", logger="conductor.serve"):
        call(asgi, "GET", "/v1/models?api_key=sk-live-secret-in-query")
        call(asgi, "GET", "/v1/sk-live-secret-in-path")
        call(asgi, "GET", "/v1/models/sk-live-secret-as-model")
    lines = [record.getMessage() for record in caplog.records]
    assert any(" /v1/models key=" in line for line in lines) and any("/v1/models/{name}" in line for line in lines)
    assert not any("sk-live" in line for line in lines), lines


def test_the_guard_passes_a_non_http_scope_through():
    seen = []

    async def inner(scope, receive, send):
        seen.append(scope["type"])
    asyncio.run(RequestGuard(inner, max_body_bytes=10, body_timeout_s=1)({"type": "lifespan"}, None, None))
    assert seen == ["lifespan"]


def test_tool_turns_infinite_numbers_and_too_many_json_values_are_400s():
    asgi = app()
    tool = [{"role": "tool", "content": "42", "tool_call_id": "c1"}, *ASK]
    openai_error(call(asgi, "POST", "/v1/chat/completions", json={"model": "mini", "messages": tool}), 400,
                 "unsupported_parameter", "messages[0].role")
    raw = b'{"model": "mini", "messages": [{"role": "user", "content": "hi"}], "conductor": {"max_cost_usd": 1e400}}'
    openai_error(call(asgi, "POST", "/v1/chat/completions", content=raw), 400, "invalid_value",
                 "conductor.max_cost_usd")
    flat = b'{"model": "mini", "metadata": [' + b"0," * 300_000 + b"0]}"
    openai_error(call(asgi, "POST", "/v1/chat/completions", content=flat), 400, "invalid_json")


def test_a_reply_sent_before_the_body_was_read_closes_the_connection():
    response = call(app(), "GET", "/health", content=b"x" * 100)
    assert response.status_code == 200 and response.headers["connection"] == "close"
    assert "connection" not in call(app(), "GET", "/health").headers


def test_our_own_fault_is_a_500_in_openai_s_shape_logged_without_its_message(caplog):
    leaked = "-".join(["sk", "in", "an", "exception"])  # a value, not source text a traceback would show

    class Broken(ScriptedConductor):
        async def generate(self, prompts, n, sampling):
            raise RuntimeError(f"the question was: {leaked}")
    serve = ServeConfig(models=[ServedModel(name="mini", workers=["cheap", "mid"])], auth={"required": False})
    asgi = create_app(orchestrator(Broken(), ContextPool(context_words=10**6)), serve)
    with caplog.at_level("INFO"):
        response = call(asgi, "POST", "/v1/chat/completions", json={"model": "mini", "messages": ASK})
    error = openai_error(response, 500)
    assert error["type"] == "server_error" and leaked not in response.text
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "RuntimeError" in logged and leaked not in logged



def test_a_client_that_leaves_stops_its_non_streamed_run():
    """Nothing else stops a non-streamed run whose client has gone (and the official client retries a call it
    timed out on): left going, it would pay for every step still to come. The app under real uvicorn on
    loopback (the server's own HTTP protocol), the client a socket closed while the first step runs."""
    from conductor.scripted_pool import ScriptedPool
    from conductor.serving.http_protocol import header_timeout_protocol

    pool = ScriptedPool({"strong": "s", "mid": "m", "cheap": "c"}, delay_s=1.5)
    serve = ServeConfig(models=[ServedModel(name="mini", workers=["cheap", "mid"], max_steps=2)],
                        auth={"required": False})
    asgi = create_app(orchestrator(ScriptedConductor(SOLVE_VERIFY), pool), serve)
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    config = uvicorn.Config(asgi, log_level="warning", access_log=False, lifespan="off",
                            http=header_timeout_protocol(30, 100))
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        body = json.dumps({"model": "mini", "messages": ASK}).encode()
        client = socket.create_connection(listening.getsockname())
        client.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        deadline = time.monotonic() + 20
        while not pool.calls:  # the first step is running
            assert time.monotonic() < deadline
            time.sleep(0.01)
        client.close()
        time.sleep(4.0)  # a run left going would have called the second step by now (each call takes 1.5 s)
        assert len(pool.calls) == 1
    finally:
        server.should_exit = True
        thread.join(10)
        listening.close()
