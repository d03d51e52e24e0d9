"""The endpoint's per-key rate limit across Ray Serve ingress replicas: replicas in processes of their own,
asking one KeyLimitActor, admit a key's burst once in all, not once each, however many requests arrive at
once; with the actor gone, each replica counts on buckets of its own (the limit holds per replica), never
on none, and after its back-off it makes the actor again and shares it."""

import asyncio
import time

import pytest
import ray

from actors.key_limit_actor import actor_name
from conductor.serve_config import ServeLimits
from conductor.serving.api_errors import ApiError

pytestmark = pytest.mark.slow
LIMITS = ServeLimits(requests_per_minute=0.5, burst=4)  # a token back every two minutes: none within the test
SCOPE, BACKOFF_S = "key-limit-test", 1.0


@ray.remote(num_cpus=0.25)
class IngressReplica:
    """Stands in for a Serve ingress replica: its own process, the app's limiter (shared or its own)."""

    def __init__(self, limits: ServeLimits, shared: bool):
        from actors.key_limit_actor import SharedKeyLimiter
        from conductor.serving.api_keys import KeyLimiter

        self.limiter = SharedKeyLimiter(limits, SCOPE, backoff_s=BACKOFF_S) if shared else KeyLimiter(limits)

    async def requests(self, key_id: str, count: int) -> list[object]:
        """``count`` requests at once; per request: True if admitted, else the 429's Retry-After."""
        async def one():
            try:
                await self.limiter.admit(key_id)
                return True
            except ApiError as exc:
                assert exc.status == 429
                return exc.headers["retry-after"]

        return list(await asyncio.gather(*(one() for _ in range(count))))

    def falling_back(self) -> bool:
        return self.limiter.unavailable


def admitted(replicas, key_id: str, rounds: int, at_once: int = 1) -> int:
    """Requests admitted when every replica sends ``at_once`` requests together, ``rounds`` times."""
    total = 0
    for _ in range(rounds):
        outcomes = ray.get([replica.requests.remote(key_id, at_once) for replica in replicas])
        total += sum(outcome is True for batch in outcomes for outcome in batch)
    return total


def stop(replicas) -> None:
    for replica in replicas:
        ray.kill(replica)
    try:
        ray.kill(ray.get_actor(actor_name(LIMITS, SCOPE)))
    except ValueError:
        pass  # already gone


def test_replicas_share_one_bucket_per_key(ray_local):
    replicas = [IngressReplica.remote(LIMITS, shared=True) for _ in range(3)]
    try:
        assert admitted(replicas, "key-a", rounds=4) == LIMITS.burst  # 12 sent, one burst admitted in all
        assert admitted(replicas, "key-b", rounds=1) == 3  # another key has a bucket of its own
        assert admitted(replicas, "key-c", rounds=2, at_once=40) == LIMITS.burst  # 240 at once, in batches
        refused = ray.get(replicas[0].requests.remote("key-a", 1))[0]
        assert refused is not True and int(refused) > 60  # Retry-After: the next token, ~2 minutes away
    finally:
        stop(replicas)


def test_each_replica_alone_would_admit_a_burst_each(ray_local):
    """The negative control: buckets per replica (the standalone server's) let a key make a burst per replica."""
    replicas = [IngressReplica.remote(LIMITS, shared=False) for _ in range(3)]
    try:
        assert admitted(replicas, "key-a", rounds=4) == 3 * LIMITS.burst
    finally:
        stop(replicas)


def test_with_the_limit_actor_gone_replicas_limit_alone_then_share_a_new_one(ray_local):
    replicas = [IngressReplica.remote(LIMITS, shared=True) for _ in range(2)]
    try:
        assert admitted(replicas, "key-a", rounds=1) == 2
        ray.kill(ray.get_actor(actor_name(LIMITS, SCOPE)), no_restart=True)
        assert admitted(replicas, "key-a", rounds=6) == 2 * LIMITS.burst  # per replica now: limited, not open
        assert all(ray.get([replica.falling_back.remote() for replica in replicas]))
        deadline = time.monotonic() + 60  # after the back-off, each makes or finds the actor again, in the background
        while any(ray.get([replica.falling_back.remote() for replica in replicas])) and time.monotonic() < deadline:
            admitted(replicas, "key-z", rounds=1)
            time.sleep(0.2)
        assert admitted(replicas, "key-b", rounds=4) == LIMITS.burst  # shared again
        assert not any(ray.get([replica.falling_back.remote() for replica in replicas]))
    finally:
        stop(replicas)


def test_another_deployment_or_other_limits_get_an_actor_of_their_own():
    assert actor_name(LIMITS, SCOPE) != actor_name(ServeLimits(requests_per_minute=0.5, burst=5), SCOPE)
    assert actor_name(LIMITS, SCOPE) != actor_name(LIMITS, "another-app")
    assert actor_name(LIMITS, SCOPE) == actor_name(ServeLimits(requests_per_minute=0.5, burst=4), SCOPE)


def test_no_limit_needs_no_actor():
    from actors.key_limit_actor import SharedKeyLimiter

    limiter = SharedKeyLimiter(ServeLimits(requests_per_minute=None), SCOPE)
    assert limiter.actor is None
    for _ in range(100):
        asyncio.run(limiter.admit("key"))
