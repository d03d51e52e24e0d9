"""Calls to one OpenAI-compatible provider: the official async client with its own retries off, and one
retry loop of ours around it, inside the provider's limits (conductor/rate_limits.py) and retry policy
(conductor/retry_policy.py). Costs come from ``usage`` x the worker's prices. Each attempt's send time goes
into the rate-limit log when its request headers have been written to the socket (httpcore's ``trace``
extension, set on every request by the HTTP client's request hook).

The API key is read from the environment variable the config names, handed to the client, and scrubbed
from every message this module produces; it is never logged, traced or put in an exception.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import logging
import os
import random
import time
import uuid
from typing import Any, Optional

import openai

from conductor.config import ProviderSpec, SamplingParams, WorkerSpec
from conductor.config_section import shown_env_name
from conductor.pool import ChatResult, DeltaSink, Messages, WorkerCallError
from conductor.rate_limits import LimitWaitTooLong, Permit, ProviderLimits
from conductor.retry_policy import Failure, backoff_seconds, classify

log = logging.getLogger(__name__)
CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4
ALLOWED_PARAMS = {"temperature", "max_tokens", "top_p", "stop", "seed", "n", "presence_penalty",
                  "frequency_penalty", "logprobs", "top_logprobs"}


# The permit of the attempt running in this task, for the HTTP client's callbacks (which only see the request).
_SENDING: contextvars.ContextVar[Optional[Permit]] = contextvars.ContextVar("conductor_sending", default=None)
SENT_EVENT = "send_request_headers.complete"  # httpcore trace event: the request line and headers are out


async def _trace_send(event: str, info: dict[str, Any]) -> None:
    """Stamp the send as late as it can be known: connecting, lazy imports and event-loop stalls before the
    write are then not part of the stamp-to-arrival delay the rate limits' margin has to absorb."""
    if event.endswith(SENT_EVENT) and (permit := _SENDING.get()) is not None:
        permit.mark_sent()


async def _add_send_trace(request: Any) -> None:
    request.extensions["trace"] = _trace_send


def estimate_prompt_tokens(messages: Messages) -> int:
    return sum(len(m.get("content") or "") // CHARS_PER_TOKEN + TOKENS_PER_MESSAGE for m in messages)


def on_the_wire(sampling: SamplingParams, request: dict[str, Any]) -> dict[str, Any]:
    """``request`` as the worker's provider takes it: the reply limit under its name (OpenAI's reasoning models
    take ``max_completion_tokens``), no sampling it refuses (``fixed_sampling``)."""
    wire = dict(request)
    if sampling.fixed_sampling:
        wire.pop("temperature", None)
        wire.pop("top_p", None)
    if sampling.token_limit_param != "max_tokens" and "max_tokens" in wire:
        wire[sampling.token_limit_param] = wire.pop("max_tokens")
    return wire


ENDED = ("stop", "end_turn", "stop_sequence", "eos", "tool_calls", "function_call")  # the model ended the reply
GAVE_UP = ("error", "abort", "aborted", "cancelled", "insufficient_system_resource")  # the server ended it early
GAVE_UP_REASON = "error"


def finish_reason(reported: Optional[str]) -> Optional[str]:
    """A provider's finish reason in OpenAI's words: "stop" where the model ended the reply; "content_filter"
    kept; "error" (``GAVE_UP_REASON``) where the server gave up on it (vLLM's "abort", OpenRouter's and
    Mistral's "error"): the attempt fails and is retried. Any other reason, a token limit's (some servers say
    "max_tokens") or vLLM's repetition detector's or one not known here, is "length": a cut answer, used as
    it is and never cached."""
    if reported is None or reported == "content_filter":
        return reported
    if reported in ENDED:
        return "stop"
    return GAVE_UP_REASON if reported in GAVE_UP else "length"


def gave_up(reported: Optional[str], streamed_pieces: int = 0) -> Failure:
    """The failure of an attempt whose server ended the reply early (or whose stream ended without saying how
    it ended): retried, unless text was already passed on."""
    how = f"with finish_reason {reported!r}" if reported else "without a finish reason"
    if streamed_pieces:
        return Failure("stream_broken", False, f"stream ended {how} after {streamed_pieces} chunks")
    return Failure("server_error", True, f"the server ended the reply {how}")


def hidden_tokens(usage: Any) -> int:
    """The reasoning tokens a reply's usage reports within its completion tokens (OpenAI's
    ``completion_tokens_details.reasoning_tokens``); 0 where a provider reports none."""
    details = getattr(usage, "completion_tokens_details", None)
    return int(getattr(details, "reasoning_tokens", None) or 0)


def price(worker: WorkerSpec, prompt_tokens: int, completion_tokens: int) -> float:
    """$ for these tokens at the worker's prices (one definition: the bills, the worst cases, the cap's bounds)."""
    return (prompt_tokens * (worker.price_in_per_m or 0.0) + completion_tokens * (worker.price_out_per_m or 0.0)) / 1e6


def refused(status: Optional[int]) -> bool:
    """An HTTP status that says the provider turned the request away before doing its work: a 429, a 503, a
    client error. A 408, a 500, a gateway's 502/504 or Cloudflare's 52x can come after the work was done (a
    proxy that gave up on an upstream still generating) and are not known to be unbilled."""
    return status is not None and (status in (429, 503) or (400 <= status < 500 and status != 408))


@dataclasses.dataclass
class _CallBill:
    """What one call's failed attempts cost: billed ones counted at their usage, and the others sent whose
    bill is unknown (a timeout, a dropped connection, a reply that could not be read, a gateway's 5xx):
    unsettled. Only a request the provider refused (``refused``) or never received is known to be unbilled."""

    usd: float = 0.0
    billed: int = 0
    unsettled: int = 0

    def add(self, failure: Failure, sent: bool) -> bool:
        """Count a failed attempt; True when its bill is unknown."""
        if failure.billed_usd is not None:
            self.usd += failure.billed_usd
            self.billed += 1
            return False
        unsettled = sent and not refused(failure.status)
        self.unsettled += unsettled
        return unsettled

    @property
    def billable(self) -> int:
        return self.billed + self.unsettled


class ProviderClient:
    def __init__(self, spec: ProviderSpec, workers: list[WorkerSpec], *, seed: Optional[int] = None,
                 recent_sends_unknown: bool = False):
        """``recent_sends_unknown``: an earlier process may have sent requests under these limits (a
        restarted pool actor); the first send then waits one window plus margin, so the sends it cannot
        see are out of every window the new ones fall in."""
        self.spec = spec
        self.workers = {w.id: w for w in workers}
        self.sampling_defaults = {w.id: w.sampling.call_defaults() for w in workers}
        self._key = os.environ.get(spec.api_key_env, "") if spec.api_key_env else ""
        if spec.api_key_env and not self._key:
            raise ValueError(f"provider {spec.id}: environment variable {shown_env_name(spec.api_key_env)} is not set")
        http_client = openai.DefaultAsyncHttpxClient(event_hooks={"request": [_add_send_trace]})
        self.client = openai.AsyncOpenAI(api_key=self._key or "no-key", base_url=spec.base_url,
                                         max_retries=0, timeout=spec.timeout_s, http_client=http_client)
        self.limits = ProviderLimits(spec)
        if recent_sends_unknown and (spec.rpm or spec.tpm):
            self.limits.pause(self.limits.span)
        self.rng = random.Random(seed)
        self.incarnation = uuid.uuid4().hex  # new at every start: a reader tells a restart by it
        self.stats = {"calls": 0, "attempts": 0, "retries": 0, "failures": 0, "rate_limited": 0,
                      "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "unsettled_usd": 0.0}

    def snapshot(self) -> dict[str, Any]:
        """Counters for dashboards, tests and conductor/pool_utilisation.py (never the key)."""
        limits, now = self.limits, time.monotonic()
        return dict(self.stats, incarnation=self.incarnation, cooldowns=limits.cooldowns, rpm=limits.rpm,
                    configured_rpm=self.spec.rpm, tpm=self.spec.tpm, rate_window_s=self.spec.rate_window_s, clock_s=now,
                    sending_s=limits.sending.seconds(now), waiting_s=limits.waiting.seconds(now))

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text

    def _fail(self, worker_id: str, kind: str, message: str, retries: int, bill: _CallBill) -> WorkerCallError:
        self.stats["failures"] += 1
        return WorkerCallError(worker_id, kind, self._scrub(message), retries, failed_attempts_usd=bill.usd,
                               unsettled_attempts=bill.unsettled)

    def request(self, worker_id: str, params: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """The sampling settings a call sends: the worker's defaults under ``params``."""
        if worker_id not in self.workers:
            raise WorkerCallError(worker_id, "not_found", f"no worker {worker_id!r} at provider {self.spec.id}")
        request = dict(self.sampling_defaults[worker_id], **(params or {}))
        unknown = set(request) - ALLOWED_PARAMS
        if unknown:
            raise WorkerCallError(worker_id, "bad_request", f"unsupported sampling params {sorted(unknown)}")
        return request

    async def chat(self, worker_id: str, messages: Messages, params: Optional[dict[str, Any]] = None,
                   on_delta: Optional[DeltaSink] = None, *,
                   max_billable_attempts: Optional[int] = None) -> ChatResult:
        """``on_delta``: stream the reply, handing each piece of text to it as it arrives. An attempt that
        fails before its first piece is retried as usual; one that fails after cannot be (the caller has
        already passed the text on), so it is final. ``max_billable_attempts``: no retry once this many
        attempts were billed or may have been (sent, then no HTTP status came back); a cost cap's."""
        request = self.request(worker_id, params)
        worker = self.workers[worker_id]
        self.stats["calls"] += 1
        started = time.monotonic()
        deadline = started + self.spec.deadline_s
        charge_estimate = estimate_prompt_tokens(messages) + int(request.get("max_tokens", 0))
        call_id = uuid.uuid4().hex  # sent on every attempt, so server logs can tie retries together
        retries, bill = 0, _CallBill()
        while True:
            try:
                async with self.limits.slot(charge_estimate, deadline) as permit:
                    self.stats["attempts"] += 1
                    sending = _SENDING.set(permit)
                    try:
                        attempt = self._attempt_streamed if on_delta is not None else self._attempt
                        result, failure = await attempt(worker, messages, request, deadline, call_id, on_delta)
                    except asyncio.CancelledError:  # stopped while the provider may be working on it
                        if permit.sent:
                            self.stats["unsettled_usd"] += self._worst_case(worker, charge_estimate, request)
                        raise
                    finally:
                        _SENDING.reset(sending)
                    if result is not None:
                        permit.settle(result.prompt_tokens + result.completion_tokens)
                        self.limits.record_success()
                    else:
                        assert failure is not None
                        if bill.add(failure, permit.sent):
                            self.stats["unsettled_usd"] += self._worst_case(worker, charge_estimate, request)
                        if failure.kind == "rate_limited":
                            self.limits.record_rate_limited()
            except LimitWaitTooLong as exc:
                raise self._fail(worker_id, "deadline", str(exc), retries, bill) from None
            if result is not None:
                return dataclasses.replace(result, retries=retries, latency_s=time.monotonic() - started,
                                           failed_attempts_usd=bill.usd, unsettled_attempts=bill.unsettled)
            assert failure is not None
            if failure.kind == "rate_limited":
                self.stats["rate_limited"] += 1
            if not failure.retryable:
                raise self._fail(worker_id, failure.kind, failure.message, retries, bill) from None
            if failure.kind != "rate_limited":
                self.limits.record_failure()
            if retries >= self.spec.max_retries:
                raise self._fail(worker_id, failure.kind, f"{failure.message}; retries exhausted", retries,
                                 bill) from None
            if max_billable_attempts is not None and bill.billable >= max_billable_attempts:
                raise self._fail(worker_id, failure.kind, f"{failure.message}; not retried: {bill.billable} "
                                 "attempt(s) billed or possibly billed, and another could exceed the cost cap",
                                 retries, bill) from None
            delay = await self._wait_before_retry(failure, retries, deadline)
            if delay is None:
                raise self._fail(worker_id, "deadline", f"{failure.message}; no time left to retry", retries, bill)
            retries += 1
            self.stats["retries"] += 1

    async def _attempt(self, worker: WorkerSpec, messages: Messages, request: dict[str, Any], deadline: float,
                       call_id: str, on_delta: Optional[DeltaSink] = None,
                       ) -> tuple[Optional[ChatResult], Optional[Failure]]:
        timeout = max(0.001, min(self.spec.timeout_s, deadline - time.monotonic()))
        try:
            raw = await self.client.chat.completions.with_raw_response.create(
                model=worker.model_name, messages=messages, timeout=timeout,
                extra_headers={"x-conductor-call-id": call_id}, **on_the_wire(worker.sampling, request))
            self._observe_limits(raw.headers)
            completion = raw.parse()
            text = completion.choices[0].message.content
            usage = completion.usage
            reported = completion.choices[0].finish_reason
            finish = finish_reason(reported)
            if getattr(completion.choices[0].message, "refusal", None):
                finish = "content_filter"  # a refusal, with or without text, is the provider's filter at work
            if text is None and finish in ("length", "content_filter"):  # limit spent or refused: no answer text
                text = ""
            if usage is None:
                raise ValueError("response has no usage")
            if text is None or finish == GAVE_UP_REASON:  # billed all the same: counted before it fails
                billed = self._charge(worker, usage.prompt_tokens, usage.completion_tokens)
                failure = (gave_up(reported) if finish == GAVE_UP_REASON
                           else Failure("malformed_response", True, "response has no message content"))
                return None, dataclasses.replace(failure, billed_usd=billed)
        except Exception as exc:  # every failure is classified; nothing escapes unclassified
            return None, self._failure(worker, exc)
        return self._settle(worker, text, usage.prompt_tokens, usage.completion_tokens, finish,
                            hidden_tokens(usage)), None

    async def _attempt_streamed(self, worker: WorkerSpec, messages: Messages, request: dict[str, Any],
                                deadline: float, call_id: str, on_delta: Optional[DeltaSink] = None,
                                ) -> tuple[Optional[ChatResult], Optional[Failure]]:
        """One streamed attempt: the whole stream within the attempt's timeout; usage from the last chunk
        (``stream_options.include_usage``), estimated from the text where a server sends none."""
        assert on_delta is not None
        timeout = max(0.001, min(self.spec.timeout_s, deadline - time.monotonic()))
        pieces: list[str] = []
        usage, reported, refused = None, None, False
        try:
            async with asyncio.timeout(timeout):
                raw = await self.client.chat.completions.with_raw_response.create(
                    model=worker.model_name, messages=messages, timeout=timeout, stream=True,
                    stream_options={"include_usage": True}, extra_headers={"x-conductor-call-id": call_id},
                    **on_the_wire(worker.sampling, request))
                self._observe_limits(raw.headers)
                async for chunk in raw.parse():
                    usage = chunk.usage or usage
                    piece = chunk.choices[0].delta.content if chunk.choices else None
                    reported = (chunk.choices[0].finish_reason if chunk.choices else None) or reported
                    refused = refused or bool(chunk.choices and getattr(chunk.choices[0].delta, "refusal", None))
                    if piece:
                        pieces.append(piece)
                        on_delta(piece)
        except Exception as exc:
            failure = self._failure(worker, exc)
            if pieces:  # the caller has passed text on: a retry would repeat it
                failure = Failure("stream_broken", False, f"stream broke after {len(pieces)} chunks: "
                                  f"{failure.message}", failure.status)
                # billed for what it sent, which no usage chunk will report: counted as the text's estimate
                billed = self._charge(worker, estimate_prompt_tokens(messages),
                                      max(1, len("".join(pieces)) // CHARS_PER_TOKEN))
                failure = dataclasses.replace(failure, billed_usd=billed)
            return None, failure
        text = "".join(pieces)
        finish = "content_filter" if refused else finish_reason(reported)
        if usage is None:  # estimated from the text where a server sends none
            prompt, completion, hidden = estimate_prompt_tokens(messages), max(1, len(text) // CHARS_PER_TOKEN), 0
        else:
            prompt, completion, hidden = usage.prompt_tokens, usage.completion_tokens, hidden_tokens(usage)
        if finish in (None, GAVE_UP_REASON):  # billed, but no whole answer: a stream cut short
            billed = self._charge(worker, prompt, completion)
            return None, dataclasses.replace(gave_up(reported, len(pieces)), billed_usd=billed)
        return self._settle(worker, text, prompt, completion, finish, hidden), None

    def _failure(self, worker: WorkerSpec, exc: Exception) -> Failure:
        if isinstance(exc, openai.APIStatusError):
            self._observe_limits(exc.response.headers)
        failure = classify(exc, self.spec.retry_after_cap_s)
        log.debug("provider %s worker %s attempt failed: %s", self.spec.id, worker.id, failure.kind)
        return Failure(failure.kind, failure.retryable, self._scrub(failure.message), failure.status,
                       failure.retry_after_s)

    @staticmethod
    def _worst_case(worker: WorkerSpec, charge_estimate: int, request: dict[str, Any]) -> float:
        """An attempt whose bill is unknown, priced as if its whole reply limit was spent (the prompt at its
        estimate): what a spend cap counts it at (``stats["unsettled_usd"]``)."""
        completion = int(request.get("max_tokens", 0))
        return price(worker, charge_estimate - completion, completion)

    def _charge(self, worker: WorkerSpec, prompt_tokens: int, completion_tokens: int) -> float:
        """Count what one billed attempt cost, whether or not its answer is usable."""
        cost = price(worker, prompt_tokens, completion_tokens)
        self.stats["prompt_tokens"] += prompt_tokens
        self.stats["completion_tokens"] += completion_tokens
        self.stats["cost_usd"] += cost
        return cost

    def _settle(self, worker: WorkerSpec, text: str, prompt_tokens: int, completion_tokens: int,
                finish_reason: Optional[str], reasoning_tokens: int = 0) -> ChatResult:
        cost = self._charge(worker, prompt_tokens, completion_tokens)
        return ChatResult(text, prompt_tokens, completion_tokens, cost, finish_reason=finish_reason or "stop",
                          reasoning_tokens=reasoning_tokens)

    def _observe_limits(self, headers: Any) -> None:
        value = headers.get("x-ratelimit-limit-requests") if headers is not None else None
        if value is not None and str(value).isdigit():
            self.limits.learn_limit(int(value))

    async def _wait_before_retry(self, failure: Failure, attempt: int, deadline: float) -> Optional[float]:
        """Sleep (holding no slot) before the next attempt; None if the deadline would pass."""
        if failure.retry_after_s is not None:
            delay = failure.retry_after_s
            self.limits.pause(delay)  # every caller of this provider waits, not just this one
        else:
            delay = backoff_seconds(attempt, self.spec.backoff_base_s, self.spec.backoff_max_s, self.rng)
        if time.monotonic() + delay >= deadline:
            return None
        await asyncio.sleep(delay)
        return delay

    async def close(self) -> None:
        await self.client.close()
