"""The endpoint under hostile and unusual input, against the real server process (tests/support/
serve_endpoint.py): the official `openai` client, raw HTTP and raw sockets. A client's mistake is a 4xx in
OpenAI's shape, never a 5xx, also for a fuzzed run of thousands of requests; slow or lying clients are
closed within the configured timeouts and cannot stall /health; a cut answer says so; every parameter in
the README's table behaves as it says; no key a caller sends reaches a log line."""

import asyncio
import collections
import json
import os
import re
import socket
import statistics
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor.serving import api_parameters
from tests.support.serve_endpoint import BODY_TIMEOUT_S, HEADER_TIMEOUT_S, MAX_BODY_BYTES

pytestmark = pytest.mark.slow
README = Path(__file__).resolve().parents[1] / "README.md"
QUESTION = "Reverse the word: violin"
SLACK_S = 8.0  # on top of a configured timeout: a loaded 2-core machine runs the timer late, never early


@pytest.fixture(scope="module")
def endpoint(serve_endpoint):
    return serve_endpoint


def ask(text=QUESTION):
    return [{"role": "user", "content": text}]


def is_openai_error(response, status_floor=400):
    body = response.json()
    return (status_floor <= response.status_code < 500 and set(body) == {"error"}
            and {"message", "type", "param", "code"} <= set(body["error"]))


def raw_request(endpoint, head: bytes, body: bytes = b"", timeout=30.0):
    """Send ``head`` (and ``body``) on a fresh socket; return (status line, seconds to the reply or close)."""
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=timeout) as sock:
        started = time.monotonic()
        sock.sendall(head + body)
        reply = b""
        while chunk := sock.recv(65536):
            reply += chunk
        return reply.split(b"\r\n", 1)[0].decode(), time.monotonic() - started, reply


def test_client_mistakes_are_4xx_in_openai_s_shape(endpoint):
    auth = {"authorization": f"Bearer {endpoint.key}", "content-type": "application/json"}
    raw_bodies = [b'{"model": "conductor-mini", "messages": [{"role": "user", "content": "\\ud800"}]}',
                  b'{"model": "conductor-mini", "messages": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
                  b'{"model": "conductor-mini", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
                  b"\xff\xfe\x00{", b"", b"null"]
    for raw in raw_bodies:
        response = httpx.post(endpoint.base_url + "/chat/completions", content=raw, headers=auth, timeout=60)
        assert is_openai_error(response), (raw[:80], response.status_code, response.text[:200])
    for method, path in (("GET", "/nowhere"), ("GET", "/chat/completions"), ("DELETE", "/models"),
                         ("PUT", "/responses")):
        response = httpx.request(method, endpoint.base_url + path, headers=auth, timeout=60)
        assert response.status_code in (404, 405) and is_openai_error(response), (method, path, response.text)
    client = endpoint.client()
    image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "https://x/cat.png"}}]}]
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="conductor-mini", messages=image)
    assert info.value.code == "unsupported_parameter" and "image_url" in info.value.message
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="conductor-mini", input=QUESTION, text={"format": {"type": "json_object"}})
    assert info.value.param == "text.format"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="conductor-mini", messages=ask(), extra_body={"temprature": 0.2})
    assert info.value.code == "unknown_parameter" and info.value.param == "temprature"


def test_a_question_no_one_can_hold_is_a_context_length_error_the_client_does_not_retry(endpoint):
    retrying = openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.key, max_retries=2, timeout=120)
    started = time.monotonic()
    with pytest.raises(openai.BadRequestError) as info:
        retrying.chat.completions.create(model="conductor-ultra", messages=ask("violin " * 150_000))
    assert info.value.code == "context_length_exceeded" and info.value.param == "messages"
    assert time.monotonic() - started < 60


def test_a_cut_answer_is_reported_as_cut(endpoint):
    client = endpoint.client()
    reply = client.chat.completions.create(model="conductor-mini", messages=ask(), max_tokens=1)
    assert reply.choices[0].finish_reason == "length"
    chunks = list(client.chat.completions.create(model="conductor-mini", messages=ask(), max_tokens=1, stream=True))
    assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
    response = client.responses.create(model="conductor-mini", input=QUESTION, max_output_tokens=1)
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    kinds = [event.type for event in client.responses.create(model="conductor-mini", input=QUESTION,
                                                             max_output_tokens=1, stream=True)]
    assert kinds[-1] == "response.incomplete" and "response.completed" not in kinds
    whole = client.chat.completions.create(model="conductor-mini", messages=ask(), max_tokens=4096)
    assert whole.choices[0].finish_reason == "stop"


def test_slow_and_lying_clients_are_closed_within_the_configured_timeouts(endpoint):
    host = f"Host: 127.0.0.1:{endpoint.port}\r\n".encode()
    with socket.create_connection(("127.0.0.1", endpoint.port)) as silent:  # connects, says nothing
        started = time.monotonic()
        silent.settimeout(HEADER_TIMEOUT_S + SLACK_S)
        assert silent.recv(1) == b"" and time.monotonic() - started < HEADER_TIMEOUT_S + SLACK_S
    with socket.create_connection(("127.0.0.1", endpoint.port)) as trickle:  # half a header, a byte at a time
        trickle.settimeout(0.5)
        started, closed = time.monotonic(), False
        for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 400:
            try:
                trickle.sendall(bytes([byte]))
                if trickle.recv(1) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
            except OSError:
                closed = True
                break
        assert closed and time.monotonic() - started < HEADER_TIMEOUT_S + SLACK_S
    auth = f"Authorization: Bearer {endpoint.key}\r\nContent-Type: application/json\r\n".encode()
    status, seconds, _ = raw_request(endpoint, b"POST /v1/chat/completions HTTP/1.1\r\n" + host + auth +
                                     f"Content-Length: {20 * 2**20}\r\n\r\n".encode(), b"x" * 1024)
    assert status.startswith("HTTP/1.1 413") and seconds < SLACK_S  # refused at once, before any body
    status, seconds, reply = raw_request(endpoint, b"POST /v1/chat/completions HTTP/1.1\r\n" + host + auth +
                                         b"Content-Length: 100000\r\n\r\n", b'{"model": "conductor-mini"')
    assert status.startswith("HTTP/1.1 408") and seconds < BODY_TIMEOUT_S + SLACK_S, (status, seconds)
    assert b'"code":"timeout"' in reply.replace(b" ", b"")
    status, seconds, _ = raw_request(endpoint, b"GET /health HTTP/1.1\r\n" + host + b"Content-Length: 4000000\r\n\r\n",
                                     b"x")  # answered before its body: closed, not kept for a trickle
    assert status.startswith("HTTP/1.1 200") and seconds < SLACK_S


def test_a_streamed_body_is_cut_off_at_the_limit_not_read_whole(endpoint):
    sent = [0]

    def endless():
        for _ in range(200):  # 200 MB, if the server read it all
            sent[0] += 2**20
            yield b" " * 2**20
    try:
        response = httpx.post(endpoint.base_url + "/chat/completions", content=endless(), timeout=60,
                              headers={"authorization": f"Bearer {endpoint.key}"})
        assert response.status_code == 413 and is_openai_error(response)
    except httpx.TransportError:
        pass  # the server answered 413 and closed while the client was still writing
    assert sent[0] <= MAX_BODY_BYTES + 16 * 2**20, sent[0]  # socket buffers hold a few MB in flight


def test_health_stays_fast_while_big_questions_and_trickling_sockets_load_the_server(endpoint):
    stop = threading.Event()
    big = json.dumps({"model": "conductor-ultra", "messages": ask("violin " * 572_000)}).encode()  # 4.0 MB
    assert len(big) < MAX_BODY_BYTES
    statuses = collections.Counter()

    def big_questions(key):
        with httpx.Client(timeout=120) as client:
            while not stop.is_set():
                response = client.post(endpoint.base_url + "/chat/completions", content=big,
                                       headers={"authorization": f"Bearer {key}"})
                statuses[response.status_code] += 1

    def trickling_sockets():
        sockets: list[socket.socket] = []
        while not stop.is_set():
            while len(sockets) < 100:
                sock = socket.create_connection(("127.0.0.1", endpoint.port))
                sock.setblocking(False)
                sock.send(b"GET /health HTTP/1.1\r\n")
                sockets.append(sock)
            for sock in list(sockets):
                try:
                    sock.send(b"X")
                except OSError:  # closed by the header timeout: the attacker reconnects
                    sockets.remove(sock)
                    sock.close()
            stop.wait(0.5)
        for sock in sockets:
            sock.close()

    threads = [threading.Thread(target=big_questions, args=(key,)) for key in endpoint.spare_keys[:4]]
    threads.append(threading.Thread(target=trickling_sockets))
    for thread in threads:
        thread.start()
    latencies = []
    try:
        time.sleep(2.0)  # the load is under way
        with httpx.Client(timeout=30) as client:
            for _ in range(300):
                started = time.perf_counter()
                assert client.get(endpoint.base_url.removesuffix("/v1") + "/health").status_code == 200
                latencies.append(time.perf_counter() - started)
                time.sleep(0.02)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    p90 = statistics.quantiles(latencies, n=10)[8]
    assert statuses and set(statuses) == {400}, statuses  # context_length_exceeded, never a 5xx
    # A loop blocked by big questions (four clients back to back) holds most /health calls for the seconds one
    # takes; the 90th percentile under 1 s leaves a loaded 2-core machine's scheduler 30 slow calls of room.
    assert p90 < 1.0, f"/health p90 {1000 * p90:.0f} ms under load (median {1000 * statistics.median(latencies):.1f})"


JSON_LEAF = st.one_of(
    st.none(), st.booleans(), st.text(max_size=12),
    st.sampled_from([0, -1, 1, 2, 3, 2**31, 2**63, -(2**63) - 1, 10**30, 0.5, -0.0, 1e308, float("inf"),
                     float("nan"), "\ud800", "x\udfff", "\x00", "\u202e\u2066", "🎻" * 3, "a" * 5000, "user",
                     "assistant", "text", "image_url", "conductor-mini", "toy-sort"]))
JSON_VALUE = st.recursive(JSON_LEAF, lambda inner: st.lists(inner, max_size=3)
                          | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
CHAT_BASE = {"model": "conductor-mini", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 8,
             "conductor": {"max_steps": 1}}
RESPONSES_BASE = {"model": "conductor-mini", "input": QUESTION, "max_output_tokens": 8, "conductor": {"max_steps": 1}}
FIELDS = sorted(set(api_parameters.CHAT) | set(api_parameters.RESPONSES) | {
    "messages.0.role", "messages.0.content", "messages.0.name", "messages.0.content.0", "input.0",
    "conductor.max_steps", "conductor.workers", "conductor.max_cost_usd", "conductor.trace", "stream_options.x",
    "text.format", "messages.1"})


def mutated(base, path, value, delete):
    """``base`` with the field at dotted ``path`` set to ``value`` (or deleted), creating what is missing."""
    body = json.loads(json.dumps(base))
    parts, node = path.split("."), body
    for part in parts[:-1]:
        key = int(part) if part.isdigit() and isinstance(node, list) else part
        if isinstance(node, list) and (not isinstance(key, int) or key >= len(node)):
            return body
        if isinstance(node, dict) and not isinstance(node.get(key), (dict, list)):
            node[key] = {}
        node = node[key]
    last = parts[-1]
    if isinstance(node, list):
        if last.isdigit() and int(last) < len(node):
            node[int(last)] = value
        else:
            node.append(value)
    elif delete:
        node.pop(last, None)
    else:
        node[last] = value
    return body


REQUEST_CASE = st.tuples(st.sampled_from(["/chat/completions", "/responses"]),
                         st.lists(st.tuples(st.sampled_from(FIELDS), JSON_VALUE, st.booleans()), min_size=1,
                                  max_size=3))
BATCH = 50  # cases a Hypothesis example sends at once (each as a whole body and cut in half)


def test_fuzzed_requests_never_get_a_5xx(endpoint):
    """Bodies mutated from a valid one (a field set to any JSON value, a boundary number, unusual Unicode,
    or deleted; nested fields created), each sent whole and cut in half; the batch of an example goes out
    concurrently, so the valid ones (a Conductor run each) overlap. 40 examples in CI: 4,000 requests."""
    keys = iter(endpoint.spare_keys[4:] * 10_000)
    statuses = collections.Counter()
    examples = 40 if os.environ.get("CI") else 4

    async def send(client, route, raw):
        response = await client.post(endpoint.base_url + route, content=raw,
                                     headers={"authorization": f"Bearer {next(keys)}"})
        statuses[response.status_code] += 1
        assert response.status_code < 500, (route, raw[:300], response.text[:300])
        if response.status_code >= 400:
            assert is_openai_error(response), response.text[:300]

    async def batch(cases):
        async with httpx.AsyncClient(timeout=120) as client:
            sends = []
            for route, mutations in cases:
                body = CHAT_BASE if route == "/chat/completions" else RESPONSES_BASE
                for path, value, delete in mutations:
                    body = mutated(body, path, value, delete)
                raw = json.dumps(body).encode()
                sends += [send(client, route, raw), send(client, route, raw[: len(raw) // 2])]
            await asyncio.gather(*sends)

    @settings(max_examples=examples, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.lists(REQUEST_CASE, min_size=BATCH, max_size=BATCH))
    def one(cases):
        asyncio.run(batch(cases))

    one()
    assert sum(statuses.values()) >= 2 * BATCH * examples and statuses[200] > 0 and statuses[400] > 0, statuses


PARAMETER_SAMPLES = {
    "stream": True, "stream_options": {"include_usage": True}, "max_tokens": 5, "max_completion_tokens": 5,
    "max_output_tokens": 5, "temperature": 0.5, "top_p": 0.5, "seed": 3, "n": 1, "instructions": "Be brief.",
    "text": {"format": {"type": "text"}}, "stop": ["\n"], "logprobs": True, "top_logprobs": 2,
    "logit_bias": {"50256": -100}, "presence_penalty": 0.5, "frequency_penalty": 0.5,
    "response_format": {"type": "json_object"}, "tools": [{"type": "function", "function": {"name": "f"}}],
    "functions": [{"name": "f"}], "tool_choice": "auto", "function_call": "auto",
    "audio": {"voice": "alloy", "format": "wav"}, "modalities": ["text", "audio"],
    "prediction": {"type": "content", "content": "x"}, "reasoning_effort": "low", "web_search_options": {},
    "verbosity": "low", "previous_response_id": "resp_1", "reasoning": {"effort": "low"},
    "include": ["reasoning.encrypted_content"], "background": True, "conversation": "conv_1",
    "prompt": {"id": "pmpt_1"}, "truncation": "auto", "max_tool_calls": 3, "user": "u-1",
    "metadata": {"k": "v"}, "store": True, "service_tier": "auto", "parallel_tool_calls": False,
    "prompt_cache_key": "k", "safety_identifier": "s",
}


def readme_parameter_table() -> dict[str, dict[str, str]]:
    """The README's table: {endpoint: {parameter: honoured | refused | ignored}}."""
    after = README.read_text().split("### Request parameters", 1)[1].splitlines()
    start = next(i for i, line in enumerate(after) if line.startswith("|"))
    rows = [line for line in after[start:][:next((i for i, line in enumerate(after[start:])
                                                   if not line.startswith("|")), None)]]
    table: dict[str, dict[str, str]] = {"chat": {}, "responses": {}}
    for row in rows[2:]:
        name, chat, responses = (cell.strip() for cell in row.strip("|").split("|")[:3])
        for endpoint, cell in (("chat", chat), ("responses", responses)):
            kind = re.match(r"[a-z]+", cell)
            if kind and kind.group() in ("honoured", "refused", "ignored"):
                table[endpoint][name.strip("`")] = kind.group()
    return table


def test_the_readme_parameter_table_is_what_the_server_does(endpoint):
    table = readme_parameter_table()
    assert table == {"chat": api_parameters.CHAT, "responses": api_parameters.RESPONSES}
    key = endpoint.spare_keys[0]
    for route, base, params in (("/chat/completions", CHAT_BASE, table["chat"]),
                                ("/responses", RESPONSES_BASE, table["responses"])):
        for name, kind in params.items():
            if name in ("model", "messages", "input"):
                continue
            sample = {"stream_options": {"include_obfuscation": False}}.get(name) if route == "/responses" else None
            response = endpoint.post(route, {**base, name: sample or PARAMETER_SAMPLES[name]}, key=key)
            if kind == "refused":
                assert response.status_code == 400, (route, name, response.text)
                assert response.json()["error"]["code"] == "unsupported_parameter", (route, name, response.text)
                assert response.json()["error"]["param"].split(".")[0] == name
            else:
                assert response.status_code == 200, (route, name, kind, response.text)


def test_a_key_in_the_query_path_or_body_reaches_no_log_line(endpoint):
    secret = endpoint.spare_keys[1]
    assert httpx.get(f"{endpoint.base_url}/models?api_key={secret}", timeout=30).status_code == 401
    assert httpx.get(f"{endpoint.base_url}/{secret}", timeout=30).status_code in (401, 404)
    auth = {"authorization": f"Bearer {endpoint.key}"}
    assert httpx.get(f"{endpoint.base_url}/models/{secret}", headers=auth, timeout=30).status_code == 404
    assert httpx.post(f"{endpoint.base_url}/chat/completions?key={secret}", headers=auth, timeout=30,
                      json={"model": "conductor-mini", "messages": ask(), secret: 1}).status_code == 400
    time.sleep(0.5)  # the log line is written as the response goes out
    log = endpoint.log.read_text()
    assert "/v1/models key=" in log
    assert secret not in log and secret[10:] not in log
