"""The endpoint as a user meets it: `python -m cluster.serve` in its own process (standalone runtime, a
trained tiny Conductor on vLLM, the simulated toy pool behind a worker API key), called by the official
`openai` client, unchanged, and by plain HTTP where the wire format itself is the point.

The same tests run against another served policy and its config, e.g. the trained SmolLM2 Conductor:
    CONDUCTOR_SERVE_TEST_CONFIG=configs/serve-smollm2.yaml \
    CONDUCTOR_SERVE_TEST_POLICY=runs/smollm2-paper7/policy pytest tests/test_serve_api.py
(questions then come from that config's simulated preset)."""

import asyncio
import collections
import json
from pathlib import Path

import httpx
import openai
import pytest

from conductor.tasks.toy import toy_tasks
from tests.support.serve_endpoint import SERVE_CONFIG

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def preset_questions() -> list[str]:
    """Questions the simulated pool of SERVE_CONFIG knows (serve-toy.yaml: the toy items)."""
    if SERVE_CONFIG == "configs/serve-toy.yaml":
        return [task.prompt for task in toy_tasks(200)[:12]]
    from conductor.config_loader import load_config
    from conductor.simulator.presets import load_preset

    tasks = list(load_preset(load_config(REPO / SERVE_CONFIG).simulator).tasks)
    return [task.prompt for task in tasks[::max(1, len(tasks) // 12)][:12]]


QUESTIONS = preset_questions()


def served_model(name: str):
    from conductor.config_loader import load_config

    return next(m for m in load_config(REPO / SERVE_CONFIG).serve.models if m.name == name)


@pytest.fixture(scope="module")
def endpoint(serve_endpoint):
    return serve_endpoint


def ask(question):
    return [{"role": "user", "content": question}]


def test_models_lists_every_variant_and_its_dated_alias(endpoint):
    names = {model.id for model in endpoint.client().models.list()}
    assert names == {"conductor-mini", "conductor-mini-2026-11-24", "conductor-ultra", "conductor-ultra-2026-11-24"}
    assert endpoint.client().models.retrieve("conductor-mini-2026-11-24").id == "conductor-mini-2026-11-24"


def test_a_chat_completion_answers_with_the_usage_broken_out_and_no_trace(endpoint):
    reply = endpoint.client().chat.completions.create(model="conductor-mini", messages=ask(QUESTIONS[0]))
    assert reply.object == "chat.completion" and reply.model == "conductor-mini"
    assert reply.choices[0].message.content and reply.choices[0].finish_reason == "stop"
    usage = reply.usage
    extra = usage.model_extra
    assert extra["conductor_tokens"] > 0 and extra["worker_tokens"] > 0 and extra["cost_usd"] > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens == extra["orchestration_tokens"]
    assert extra["workers"]["calls"] >= 1
    assert "conductor_trace" not in (reply.model_extra or {})


def test_a_streamed_chat_shows_progress_then_the_answer_then_usage(endpoint):
    stream = endpoint.client().chat.completions.create(model="conductor-ultra", messages=ask(QUESTIONS[1]), stream=True,
                                                       stream_options={"include_usage": True})
    events, text, usage, finish = [], "", None, None
    for chunk in stream:
        event = (chunk.model_extra or {}).get("conductor_event")
        if event:
            events.append(event["type"])
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
        assert "conductor_trace" not in (chunk.model_extra or {})
    assert text and finish == "stop" and usage is not None and usage.model_extra["worker_tokens"] > 0
    assert "step.started" in events and "step.finished" in events
    assert events.index("step.started") < events.index("step.finished")
    raw = endpoint.post("/chat/completions", {"model": "conductor-mini", "messages": ask(QUESTIONS[2]), "stream": True})
    frames = [line for line in raw.text.split("\n") if line.startswith("data: ")]
    assert raw.headers["content-type"].startswith("text/event-stream") and frames[-1] == "data: [DONE]"
    deltas = [json.loads(f[6:])["choices"][0]["delta"].get("content") or "" for f in frames[:-1]]
    assert "".join(deltas).strip()


def test_the_trace_is_there_when_asked_for(endpoint):
    reply = endpoint.client().chat.completions.create(model="conductor-ultra", messages=ask(QUESTIONS[3]),
                                                      extra_body={"conductor": {"trace": True}})
    trace = reply.model_extra["conductor_trace"]
    assert trace["model"] == "conductor-ultra" and trace["limits"]["max_steps"] == 5
    steps = [step for r in trace["rounds"] for step in r["steps"]]
    assert steps and all({"worker", "subtask", "access", "tokens_in", "tokens_out", "latency_s", "cost_usd", "status"}
                          <= set(step) for step in steps)
    assert trace["usage"]["cost_usd"] == pytest.approx(reply.usage.model_extra["cost_usd"])
    assert trace["rounds"][0]["conductor_output"] is not None  # what the Conductor wrote, parsed or not
    if served_model("conductor-ultra").constrain_format:  # decoded under the workflow expression: it parses
        assert trace["rounds"][0]["parse_error"] is None and trace["rounds"][0]["status"] == "ok"
    assert trace["timing"]["overhead_s"] >= 0


def test_responses_create_plain_and_streamed(endpoint):
    client = endpoint.client()
    response = client.responses.create(model="conductor-mini", input=QUESTIONS[4], instructions="Be brief.")
    assert response.status == "completed" and response.output_text
    assert response.usage.input_tokens > 0 and response.usage.model_extra["conductor_tokens"] > 0
    kinds, text = [], ""
    for event in client.responses.create(model="conductor-mini", input=QUESTIONS[5], stream=True):
        kinds.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
        if event.type == "response.completed":
            assert event.response.output_text == text and event.response.usage.total_tokens > 0
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed" and text
    assert "conductor.progress" in kinds


def test_errors_in_openai_s_shape(endpoint):
    with pytest.raises(openai.AuthenticationError):
        endpoint.client(key="sk-not-a-key").models.list()
    no_key = endpoint.post("/chat/completions", {"model": "conductor-mini", "messages": ask("hi")}, key="")
    assert no_key.status_code == 401 and no_key.json()["error"]["code"] == "missing_api_key"
    robot = [{"role": "robot", "content": "x"}]
    bad = endpoint.post("/chat/completions", {"model": "conductor-mini", "messages": robot})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages[0].role"
    bad = endpoint.post("/chat/completions", {"model": "conductor-mini", "messages": ask("x"),
                                              "conductor": {"max_step": 2}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "conductor.max_step"
    assert endpoint.post("/chat/completions", {"model": "conductor-mini"}).json()["error"]["param"] == "messages"
    not_json = httpx.post(endpoint.base_url + "/chat/completions", content=b"{not json",
                          headers={"authorization": f"Bearer {endpoint.key}"})
    assert not_json.status_code == 400 and not_json.json()["error"]["code"] == "invalid_json"
    with pytest.raises(openai.NotFoundError):
        endpoint.client().chat.completions.create(model="conductor-gigantic", messages=ask(QUESTIONS[0]))
    with pytest.raises(openai.BadRequestError) as info:
        endpoint.client().chat.completions.create(model="conductor-ultra", messages=ask(QUESTIONS[0]),
                                                  extra_body={"conductor": {"max_cost_usd": 1e-9}})
    assert info.value.code == "cost_cap_too_low"
    statuses = collections.Counter()
    for _ in range(1000):  # burst 250, +10/s: cheap requests (refused after the limiter) until the bucket is empty
        response = endpoint.post("/chat/completions", {"model": "no-such-model", "messages": ask("x")},
                                 key=endpoint.flood_key)
        statuses[response.status_code] += 1
        if response.status_code == 429:
            assert int(response.headers["retry-after"]) >= 1
            assert response.json()["error"]["type"] == "rate_limit_error"
            break
    assert statuses[429] == 1 and statuses[404] >= 250
    assert endpoint.client().models.list()  # another key is not limited by that one


def test_200_concurrent_requests_get_no_server_error(endpoint):
    async def main():
        client = openai.AsyncOpenAI(base_url=endpoint.base_url, api_key=endpoint.load_key, max_retries=0, timeout=300)

        async def one(i):
            try:
                question = QUESTIONS[i % len(QUESTIONS)]
                await client.chat.completions.create(model="conductor-mini", messages=ask(question))
                return 200
            except openai.APIStatusError as exc:
                return exc.status_code
            except openai.APIConnectionError as exc:  # counted, so a failure says how many and why
                return f"connection error: {exc.__cause__!r}"

        try:
            return await asyncio.gather(*(one(i) for i in range(200)))
        finally:
            await client.close()

    statuses = collections.Counter(asyncio.run(main()))
    assert statuses == {200: 200}, statuses


def test_worker_and_caller_keys_appear_in_no_response_trace_or_log_line(endpoint):
    traced = endpoint.post("/chat/completions", {"model": "conductor-ultra", "messages": ask(QUESTIONS[6]),
                                                 "conductor": {"trace": True}, "stream": True})
    assert "conductor_trace" in traced.text
    log = endpoint.log.read_text()
    assert "/v1/chat/completions key=" in log and "status=200" in log  # request lines were logged
    for secret in (endpoint.worker_key, endpoint.worker_key[8:]):
        assert secret not in log and not any(secret in body for body in endpoint.bodies)
    for caller in (endpoint.key, endpoint.load_key, endpoint.flood_key):
        assert caller not in log
