"""The endpoint's per-key rate limit across Ray Serve ingress replicas: replicas in processes of their own,
asking one KeyLimitActor, admit a key's burst once in all, not once each; with the actor gone, each replica
falls back to buckets of its own (the limit holds per replica), never to no limit."""

import asyncio

import pytest
import ray

from actors.key_limit_actor import actor_name
from conductor.serve_config import ServeLimits
from conductor.serving.api_errors import ApiError

pytestmark = pytest.mark.slow
LIMITS = ServeLimits(requests_per_minute=0.5, burst=4)  # a token back every two minutes: none within the test


@ray.remote(num_cpus=0.25)
class IngressReplica:
    """Stands in for a Serve ingress replica: its own process, the app's limiter (shared or its own)."""

    def __init__(self, limits: ServeLimits, shared: bool):
        from actors.key_limit_actor import SharedKeyLimiter
        from conductor.serving.api_keys import KeyLimiter

        self.limiter = SharedKeyLimiter(limits) if shared else KeyLimiter(limits)

    async def requests(self, key_id: str, count: int) -> list[object]:
        """Per request: True if admitted, else the 429's Retry-After."""
        outcomes = []
        for _ in range(count):
            try:
                await self.limiter.admit(key_id)
                outcomes.append(True)
            except ApiError as exc:
                assert exc.status == 429
                outcomes.append(exc.headers["retry-after"])
        return outcomes

    def falling_back(self) -> bool:
        return self.limiter.unavailable


def admitted(replicas, key_id: str, count: int) -> int:
    """Requests admitted when every replica sends ``count``, interleaved one round at a time."""
    total = 0
    for _ in range(count):
        total += sum(o is True for outcomes in ray.get([r.requests.remote(key_id, 1) for r in replicas])
                     for o in outcomes)
    return total


def test_replicas_share_one_bucket_per_key(ray_local):
    replicas = [IngressReplica.remote(LIMITS, shared=True) for _ in range(3)]
    try:
        assert admitted(replicas, "key-a", 4) == LIMITS.burst  # 12 sent, one burst admitted in all
        assert admitted(replicas, "key-b", 1) == 3  # another key has a bucket of its own
        refused = ray.get(replicas[0].requests.remote("key-a", 1))[0]
        assert refused != True and int(refused) > 60  # noqa: E712  (Retry-After: the next token, ~2 min away)
    finally:
        for replica in replicas:
            ray.kill(replica)
        ray.kill(ray.get_actor(actor_name(LIMITS)))


def test_each_replica_alone_would_admit_a_burst_each(ray_local):
    """The negative control: buckets per replica (the standalone server's) let a key make a burst per replica."""
    replicas = [IngressReplica.remote(LIMITS, shared=False) for _ in range(3)]
    try:
        assert admitted(replicas, "key-a", 4) == 3 * LIMITS.burst
    finally:
        for replica in replicas:
            ray.kill(replica)


def test_with_the_limit_actor_gone_each_replica_limits_on_its_own(ray_local):
    replicas = [IngressReplica.remote(LIMITS, shared=True) for _ in range(2)]
    try:
        assert admitted(replicas, "key-a", 1) == 2
        ray.kill(ray.get_actor(actor_name(LIMITS)), no_restart=True)
        assert admitted(replicas, "key-a", 6) == 2 * LIMITS.burst  # per replica now: limited, not open
        assert all(ray.get([r.falling_back.remote() for r in replicas]))
    finally:
        for replica in replicas:
            ray.kill(replica)


def test_other_limits_get_an_actor_of_their_own():
    assert actor_name(LIMITS) != actor_name(ServeLimits(requests_per_minute=0.5, burst=5))
    assert actor_name(LIMITS) == actor_name(ServeLimits(requests_per_minute=0.5, burst=4))


def test_no_limit_needs_no_actor():
    from actors.key_limit_actor import SharedKeyLimiter

    limiter = SharedKeyLimiter(ServeLimits(requests_per_minute=None))
    assert limiter.actor is None
    for _ in range(100):
        asyncio.run(limiter.admit("key"))
