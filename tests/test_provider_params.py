"""What a call sends, as the provider takes it: OpenAI's reasoning models (o-series, gpt-5) refuse
``max_tokens`` and any temperature or top_p but their default, so a worker can name its reply limit
``max_completion_tokens`` and send no sampling (``sampling.token_limit_param``, ``sampling.fixed_sampling``).
Against a small HTTP server that refuses as OpenAI does, through the real provider client and openai client."""

from __future__ import annotations

import asyncio

import pytest

from conductor.config import ProviderSpec, SamplingParams, WorkerSpec
from conductor.pool import WorkerCallError
from conductor.provider_client import ProviderClient
from tests.support.reply_server import ReplyServer, completion


def reasoning_model(body):
    """As OpenAI's reasoning models answer: a 400 naming the parameter for ``max_tokens``, a temperature other
    than 1 or a top_p; an answer otherwise."""
    refused = ("max_tokens" if "max_tokens" in body else
               "temperature" if body.get("temperature", 1) != 1 else
               "top_p" if "top_p" in body else None)
    if refused:
        return 400, {"error": {"message": f"Unsupported parameter: '{refused}'", "type": "invalid_request_error",
                               "param": refused, "code": "unsupported_parameter"}}
    return 200, completion(body["model"], "42", completion_tokens=1)


@pytest.fixture
def server():
    running = ReplyServer(reasoning_model)
    yield running
    running.close()


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
