"""The endpoint's per-key rate limit, shared by every Ray Serve ingress replica.

Each replica used to keep its own buckets, so a key could make ``requests_per_minute`` times the number of
replicas, and autoscaling raised a caller's limit with the load. Now one named, detached ``KeyLimitActor``
holds the buckets (conductor/serving/api_keys.py ``KeyLimiter``); a replica asks it for a token per request
(``SharedKeyLimiter.admit``) and answers the same 429 an empty bucket answers standalone.

The actor is found by name: ``conductor-key-limit-<digest of the limits>``, so replicas of one config share it,
and a redeployment with other limits gets an actor of its own rather than the old buckets. Detached: it
outlives the replica that made it (replicas come and go with load). If the actor cannot answer within
``ASK_TIMEOUT_S`` (it died and is restarting, its node is gone), the replica counts the request against its
own buckets for that request, and says so in its log once per outage: the limit then holds per replica, as
it did before, rather than not at all or refusing every caller.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging

import ray

from conductor.serve_config import ServeLimits
from conductor.serving.api_keys import KeyLimiter, rate_limited

log = logging.getLogger(__name__)
ACTOR_PREFIX = "conductor-key-limit"
ASK_TIMEOUT_S = 2.0


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=0)
class KeyLimitActor:
    """The buckets; a restarted actor starts them full (it cannot know what its predecessor handed out)."""

    def __init__(self, limits: ServeLimits):
        self.limiter = KeyLimiter(limits)

    def take(self, key_id: str) -> float:
        return self.limiter.take(key_id)


def actor_name(limits: ServeLimits) -> str:
    digest = hashlib.sha256(f"{limits.requests_per_minute!r}/{limits.burst}".encode()).hexdigest()[:12]
    return f"{ACTOR_PREFIX}-{digest}"


class SharedKeyLimiter:
    """A replica's side of the shared buckets (``RequestLimiter``)."""

    def __init__(self, limits: ServeLimits):
        self.own = KeyLimiter(limits)  # this replica's buckets, used only while the actor cannot answer
        self.actor = None if self.own.rate is None else KeyLimitActor.options(
            name=actor_name(limits), get_if_exists=True, lifetime="detached").remote(limits)
        self.unavailable = False

    async def admit(self, key_id: str) -> None:
        if self.actor is None:
            return
        try:
            wait = await asyncio.wait_for(self.actor.take.remote(key_id), ASK_TIMEOUT_S)
            if self.unavailable:
                log.warning("the shared key limit answers again: the limit holds across replicas")
            self.unavailable = False
        except (TimeoutError, ray.exceptions.RayError) as exc:
            if not self.unavailable:
                log.warning("the shared key limit did not answer (%s): counting against this replica's own "
                            "buckets until it does", type(exc).__name__)
            self.unavailable = True
            wait = self.own.take(key_id)
        if wait > 0:
            raise rate_limited(self.own.rate, wait)
