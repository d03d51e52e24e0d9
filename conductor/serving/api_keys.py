"""Bearer-key auth and per-key rate limits for the endpoint.

Keys are held only as SHA-256 digests (``serve.auth.key_hashes``, and the plaintext keys of the env var
``serve.auth.keys_env`` hashed as they are read). A presented key is hashed and compared with every
stored digest by ``hmac.compare_digest``, without stopping at a match, so the time taken says nothing
about which digest, or how much of one, matched. A key is known to the rest of the server only by a
short, non-reversible id (the digest's first 12 hex digits), which is what logs and limits use.

Rate limit: a token bucket per key, ``burst`` deep, refilled at ``requests_per_minute / 60`` per second.
An empty bucket answers 429 with ``Retry-After``: the seconds until one token is back. One set of buckets
per endpoint: the standalone server's own, or on Ray Serve one actor that every ingress replica asks.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import threading
import time
from typing import Optional, Protocol

from conductor.serve_config import ServeAuth, ServeLimits
from conductor.serving.api_errors import ApiError

ANONYMOUS = "anonymous"


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


class KeyRing:
    def __init__(self, auth: ServeAuth):
        self.required = auth.required
        plain = os.environ.get(auth.keys_env, "") if auth.keys_env else ""
        digests = list(auth.key_hashes) + [hash_key(k.strip()) for k in plain.split(",") if k.strip()]
        self.digests = [bytes.fromhex(d.removeprefix("sha256:")) for d in dict.fromkeys(digests)]
        if self.required and not self.digests:
            raise ValueError("serve.auth.required is set but no key is configured: set serve.auth.key_hashes or "
                             f"the env var {auth.keys_env} (or serve.auth.required=false for a local trial)")

    def identify(self, authorization: Optional[str]) -> str:
        """The caller's key id, or a 401 in OpenAI's words."""
        if not self.required:
            return ANONYMOUS
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise ApiError(401, "You didn't provide an API key. Send it as 'Authorization: Bearer <key>'.",
                           code="missing_api_key")
        presented = hashlib.sha256(key.strip().encode()).digest()
        matched: Optional[bytes] = None
        for digest in self.digests:  # no early exit: the time does not depend on which digest matched
            if hmac.compare_digest(presented, digest):
                matched = digest
        if matched is None:
            raise ApiError(401, "Incorrect API key provided.", code="invalid_api_key")
        return matched.hex()[:12]


class RequestLimiter(Protocol):
    async def admit(self, key_id: str) -> None:
        """Take a token for ``key_id`` or raise a 429 (``rate_limited``)."""


class KeyLimiter:
    """The buckets of this process. On Ray Serve the ingress replicas share one set instead
    (actors/key_limit_actor.py), which calls ``take`` and answers with the same 429."""

    def __init__(self, limits: ServeLimits):
        self.rate = limits.requests_per_minute / 60.0 if limits.requests_per_minute else None
        self.burst = float(limits.burst)
        self.buckets: dict[str, tuple[float, float]] = {}  # key id -> (tokens, as of)
        self.lock = threading.Lock()

    def take(self, key_id: str, now: Optional[float] = None) -> float:
        """Take a token for ``key_id``: 0.0 when taken, else the seconds until one is back (none taken)."""
        if self.rate is None:
            return 0.0
        now = time.monotonic() if now is None else now
        with self.lock:
            tokens, since = self.buckets.get(key_id, (self.burst, now))
            tokens = min(self.burst, tokens + (now - since) * self.rate)
            if tokens < 1.0:
                self.buckets[key_id] = (tokens, now)
                return (1.0 - tokens) / self.rate
            self.buckets[key_id] = (tokens - 1.0, now)
            return 0.0

    async def admit(self, key_id: str) -> None:
        """Take a token for ``key_id`` or raise a 429 with ``Retry-After``."""
        wait = self.take(key_id)
        if wait > 0:
            raise rate_limited(self.rate, wait)


def rate_limited(rate_per_s: float, wait_s: float) -> ApiError:
    """The 429 of an empty bucket, in OpenAI's words, with the seconds until a token is back."""
    return ApiError(429, f"Rate limit reached for this key: {rate_per_s * 60:g} requests per minute. "
                    f"Try again in {wait_s:.2f}s.", kind="rate_limit_error", code="rate_limit_exceeded",
                    headers={"retry-after": str(max(1, math.ceil(wait_s))),
                             "retry-after-ms": str(max(1, math.ceil(wait_s * 1000)))})


if __name__ == "__main__":  # a key on stdin -> the digest to put in serve.auth.key_hashes
    import sys

    print(hash_key(sys.stdin.readline().strip()))
