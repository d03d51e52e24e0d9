import email.utils
import random
import time

import httpx
import openai
import pytest

from conductor.retry_policy import backoff_seconds, classify, retry_after_seconds

REQUEST = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")


def status_error(status, message="boom", headers=None):
    response = httpx.Response(status, headers=headers or {}, request=REQUEST,
                              json={"error": {"message": message}})
    return openai.APIStatusError(message, response=response, body={"error": {"message": message}})


@pytest.mark.parametrize("status, kind, retryable", [
    (429, "rate_limited", True), (500, "server_error", True), (503, "server_error", True), (408, "timeout", True),
    (409, "conflict", True), (400, "bad_request", False), (401, "auth", False), (403, "permission", False),
    (404, "not_found", False), (422, "bad_request", False),
])
def test_status_classification(status, kind, retryable):
    failure = classify(status_error(status), retry_after_cap_s=60)
    assert (failure.kind, failure.retryable, failure.status) == (kind, retryable, status)


def test_context_length_fails_fast_with_its_own_kind():
    failure = classify(status_error(400, "This model's maximum context length is 8192 tokens"), 60)
    assert failure.kind == "context_length" and not failure.retryable and "8192" in failure.message


def test_transport_failures_are_retryable():
    assert classify(openai.APITimeoutError(request=REQUEST), 60).kind == "timeout"
    assert classify(openai.APIConnectionError(request=REQUEST), 60).kind == "connection"
    assert classify(ValueError("no content"), 60).kind == "malformed_response"
    assert classify(httpx.RemoteProtocolError("dropped"), 60).retryable


def test_retry_after_forms_and_cap():
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}, 60) == 0.25
    assert retry_after_seconds({"retry-after": "3"}, 60) == 3.0
    assert retry_after_seconds({"retry-after": "3000"}, 60) == 60.0
    date = email.utils.formatdate(time.time() + 5, usegmt=True)
    assert 3.0 < retry_after_seconds({"retry-after": date}, 60) <= 5.0
    assert retry_after_seconds({"retry-after": "soon"}, 60) is None
    assert retry_after_seconds({}, 60) is None
    assert classify(status_error(429, headers={"retry-after": "2"}), 60).retry_after_s == 2.0


def test_full_jitter_backoff_bounds():
    rng = random.Random(0)
    for attempt in range(8):
        draws = [backoff_seconds(attempt, 0.5, 8.0, rng) for _ in range(200)]
        ceiling = min(8.0, 0.5 * 2 ** attempt)
        assert all(0 <= d <= ceiling for d in draws) and max(draws) > 0.8 * ceiling
