"""A reward server of the user's: ``verifier: http`` with ``reward_server: {url: ...}`` in a dataset entry
scores that dataset's answers by POSTing them to the server, as OpenRLHF's remote reward model does.

The wire contract. Each request is one POST to ``url`` of ``Content-Type: application/json``::

    {"items": [{"id": "support/17", "domain": "support", "question": "...", "answer": "...",
                "response": "...", "meta": {...}}, ...]}

``question`` is the prompt as the workers got it (the answer-format instruction included), ``answer`` the
reference ("" where the field map names none), ``response`` the episode's final answer (never empty) and
``meta`` the entry's meta columns. A request holds 1 to ``batch_size`` items. The answer is a 200 (any
2xx) with::

    {"scores": [1.0, 0.25, null, ...]}

one entry per item, in the items' order: a number in [0, 1], or null for "cannot judge". Any other keys
are ignored. With ``api_key_env`` set, each request carries ``Authorization: Bearer <that variable's
value>``; the value is read when a request is sent and appears in no log, error or record.

What comes of each answer (never a wrong answer for a call that failed):
- a score in [0, 1]: the verdict; the reward interpolates it and 0.5 or more counts as correct, as a
  Python reward's (conductor/verifiers/python_reward.py);
- null, NaN, a non-number (true/false included) or a number outside [0, 1]: that item is an
  infrastructure error (unscored, counted, out of accuracy: conductor/episode_score.py); the others of the
  batch stand, and it is not retried;
- no answer within ``timeout_s`` (httpx's: to connect, and between bytes read), a refused or dropped
  connection, 408, 429, 5xx, a body that is not JSON or has no ``scores`` list of the items' length: the
  whole batch is sent again, up to ``retries`` times, after a backoff with full jitter
  (conductor/retry_policy.py; a 429's or 503's Retry-After is honoured, capped at ``backoff_max_s``);
  when the last try fails, every item of the batch is an infrastructure error;
- any other 4xx (a bad request, a refused key, a wrong path) or a 3xx (redirects are not followed): not
  retried, every item of the batch an infrastructure error. Any 2xx is read as the answer.

Batching. The scorer verifies episodes on threads (conductor/episode_score.py); concurrent checks for one
server are gathered into one POST of up to ``batch_size`` items, or what arrived within ``batch_wait_s`` of
the first (conductor/call_batcher.py). The server must answer a batch as it would its items one by one:
a retry sends the same items again. Each process that scores keeps one client per server (its
connections are pooled); nothing here runs at config load but the settings' checks.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import random
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, Optional
from urllib.parse import urlsplit, urlunsplit

import httpx
from pydantic import AfterValidator, ConfigDict, Field

from conductor.call_batcher import CallBatcher
from conductor.config_section import Section, shown_env_name
from conductor.per_process import PerProcess
from conductor.retry_policy import Failure, backoff_seconds, retry_after_seconds
from conductor.verifiers.python_reward import CORRECT_AT
from conductor.verifiers.text_match import extract_answer
from conductor.verifiers.verdict import Verdict

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task

RETRYABLE_STATUS = {408, 429}  # and every 5xx
log = logging.getLogger(__name__)


def check_url(url: str) -> str:
    """At config load: an absolute http(s) URL with a host and no credentials (pydantic names the setting)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("not an http(s) URL with a host (e.g. http://127.0.0.1:8000/score)")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials do not belong in the URL: name an environment variable in api_key_env")
    if parts.fragment:
        raise ValueError("a URL with a #fragment (the server never sees it)")
    return url


def shown_url(url: str) -> str:
    """The URL as logs and errors show it: no query, where a token may hide."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", ""))


class RewardServer(Section):
    """A dataset entry's ``reward_server``. Frozen: a Task carries it, and each process keeps one client per
    distinct server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: Annotated[str, AfterValidator(check_url)] = Field(
        description="where to POST batches, e.g. http://127.0.0.1:8000/score (no credentials in it)")
    timeout_s: float = Field(default=30.0, gt=0, description="per request: to connect, and between bytes read")
    retries: int = Field(default=3, ge=0, le=20, description="tries after the first for a batch that failed")
    backoff_base_s: float = Field(default=0.5, gt=0, description="retry n waits uniform(0, base * 2**n)")
    backoff_max_s: float = Field(default=10.0, gt=0, description="caps the backoff and a Retry-After")
    batch_size: int = Field(default=32, ge=1, le=4096, description="items per POST, at most")
    batch_wait_s: float = Field(default=0.05, ge=0, le=60, description="how long a batch waits to fill")
    api_key_env: Optional[str] = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", description="an "
                                       "environment variable whose value is sent as 'Authorization: Bearer ...'")

    def __repr_args__(self) -> Any:
        """The URL without its query (a Task's repr shows this one)."""
        for name, value in super().__repr_args__():
            yield name, shown_url(value) if name == "url" else value


class Outcome(NamedTuple):
    """One item's answer: a score, or why there is none (``kind``: a short name for the log)."""

    score: Optional[float]
    problem: str = ""
    kind: str = ""


class RewardServerClient:
    """One server's batches, retries and connections in this process; thread-safe."""

    def __init__(self, server: RewardServer):
        self.server = server
        self.shown = shown_url(server.url)
        self._http = httpx.Client(timeout=server.timeout_s, follow_redirects=False)
        self._batcher: CallBatcher[dict[str, Any], Outcome] = CallBatcher(self._post, server.batch_size,
                                                                           server.batch_wait_s)
        self._rng = random.Random()

    def score(self, item: dict[str, Any]) -> Outcome:
        """One item of the wire contract, sent in a batch with the other threads' items."""
        return self._batcher.call(item)

    def _post(self, items: Sequence[dict[str, Any]]) -> list[Outcome]:
        try:
            headers = self._headers()
            body = json.dumps({"items": [_finite(item) for item in items]}, default=str, allow_nan=False).encode()
        except (ValueError, TypeError) as exc:  # no key to send, or a meta value (or key) JSON cannot hold
            return [Outcome(None, str(exc), "unsent")] * len(items)
        failure = None
        for attempt in range(self.server.retries + 1):
            if failure is not None:
                time.sleep(failure.retry_after_s if failure.retry_after_s is not None else backoff_seconds(
                    attempt - 1, self.server.backoff_base_s, self.server.backoff_max_s, self._rng))
            failure, scores = self._try(body, headers, len(items))
            if failure is None:
                return [_outcome(value) for value in scores]
            log.debug("reward server %s: %s (try %d of %d)", self.shown, failure.message, attempt + 1,
                      self.server.retries + 1)
            if not failure.retryable:
                break
        problem = failure.message
        if failure.retryable:
            problem += " (1 try)" if attempt == 0 else f" ({attempt + 1} tries)"
        return [Outcome(None, problem, failure.kind)] * len(items)

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        name = self.server.api_key_env
        if name is not None:
            key = os.environ.get(name)
            if not key:
                raise ValueError(f"environment variable {shown_env_name(name)} (reward_server.api_key_env) is not set")
            headers["Authorization"] = f"Bearer {key}"
        return headers

    def _try(self, body: bytes, headers: dict[str, str], count: int) -> tuple[Optional[Failure], list[Any]]:
        """One POST: (None, the scores) or (why it failed, [])."""
        try:
            response = self._http.post(self.server.url, content=body, headers=headers)
        except httpx.TimeoutException:
            return Failure("timeout", True, f"no answer within {self.server.timeout_s:g} s"), []
        except httpx.TransportError as exc:  # its text may quote the URL: the type says enough
            return Failure("connection", True, f"connection failed ({type(exc).__name__})"), []
        except httpx.HTTPError as exc:  # a body it cannot decode (a bad Content-Encoding), ...
            return Failure("malformed_response", True, f"unreadable response ({type(exc).__name__})"), []
        status = response.status_code
        if status in RETRYABLE_STATUS or status >= 500:
            return Failure("server_error", True, f"HTTP {status}", status,
                           retry_after_seconds(response.headers, self.server.backoff_max_s)), []
        if not 200 <= status < 300:
            why = "redirects are not followed" if 300 <= status < 400 else "the server refused the request"
            return Failure("refused", False, f"HTTP {status} ({why}; not retried)", status), []
        try:
            scores = response.json().get("scores")
        except (ValueError, AttributeError, RecursionError):  # not JSON, JSON that is not an object, or too deep
            return Failure("malformed_response", True, "the body is not a JSON object"), []
        if not isinstance(scores, list):
            return Failure("malformed_response", True, "the body has no 'scores' list"), []
        if len(scores) != count:
            return Failure("malformed_response", True, f"{len(scores)} scores for {count} items"), []
        return None, scores


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity inside it (a meta field's) as null: JSON has neither, and a strict
    server would refuse the whole batch over one item's."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(inner) for key, inner in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(inner) for inner in value]
    return value


def _outcome(value: Any) -> Outcome:
    if value is None:
        return Outcome(None, "could not judge (a null score)", "null")
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return Outcome(None, f"gave {type(value).__name__} {str(value)[:40]!r}, not a number in [0, 1]",
                       "not_a_number")
    try:
        number = float(value)
    except OverflowError:  # an integer too large for a float
        return Outcome(None, f"gave {str(value)[:40]}..., outside [0, 1]", "out_of_range")
    if math.isnan(number):
        return Outcome(None, "gave NaN", "nan")
    if not 0.0 <= number <= 1.0:
        return Outcome(None, f"gave {number:g}, outside [0, 1]", "out_of_range")
    return Outcome(number)


_clients: PerProcess[RewardServer, RewardServerClient] = PerProcess()
_logged: set[tuple[str, str]] = set()  # (url, problem) already logged by this process


def client_for(server: RewardServer) -> RewardServerClient:
    """This process's client for ``server``, made on first use."""
    return _clients.get(server, lambda: RewardServerClient(server))


def item_of(task: Task, response: str) -> dict[str, Any]:
    """One item of a request, as the wire contract above spells it."""
    return {"id": task.id, "domain": task.domain, "question": task.prompt, "answer": task.answer,
            "response": response, "meta": task.meta}


def check(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    """The ``http`` kind's verifier: the task's reward server on the response; never raises."""
    server = task.reward_server
    if server is None:
        return Verdict(False, infra_error=f"task {task.id}: verifier http without a reward_server")
    client = client_for(server)
    extracted = extract_answer(response)
    outcome = client.score(item_of(task, response))
    if outcome.score is None:
        reason = f"reward server {client.shown}: {outcome.problem}"
        if (client.shown, outcome.kind) not in _logged:  # once per kind: a server down fails every call
            _logged.add((client.shown, outcome.kind))
            log.warning("%s; such episodes are infrastructure errors", reason)
        return Verdict(False, extracted, infra_error=reason)
    return Verdict(outcome.score >= CORRECT_AT, extracted, f"score {outcome.score:g}", score=outcome.score)
