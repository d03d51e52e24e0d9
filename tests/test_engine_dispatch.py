"""Least-loaded dispatch over engine replicas, and failover past replicas that refuse. The replicas here
are stand-ins for actor handles (two real vLLM replicas do not fit this 2-core machine next to the rest
of the suite); the real engine actor is covered by tests/test_rollouts_ray.py and, killed and repaired,
by tests/test_train_async.py."""

import asyncio
import time

import pytest

from actors.conductor_engine import EngineGroup, EngineNotReady
from conductor.rollout import SamplingSettings


class StandInReplica:
    def __init__(self, name, delay):
        self.name, self.delay, self.calls = name, delay, 0
        replica = self

        class Method:
            async def remote(self, prompts, n, sampling):
                replica.calls += 1
                await asyncio.sleep(replica.delay)
                return [[replica.name] * n for _ in prompts]

        self.generate = Method()


class HeldReplica(StandInReplica):
    """Answers only once ``release`` is set: busy for as long as the test says, whatever the machine's speed."""

    def __init__(self, name):
        super().__init__(name, 0.0)
        replica, self.release = self, asyncio.Event()

        class Method:
            async def remote(self, prompts, n, sampling):
                replica.calls += 1
                await replica.release.wait()
                return [[replica.name] * n for _ in prompts]

        self.generate = Method()


def test_calls_go_to_the_replica_with_fewest_in_flight():
    fast = StandInReplica("fast", 0.01)

    async def main():
        slow = HeldReplica("slow")  # its Event belongs to this event loop
        group = EngineGroup([slow, fast])
        first = asyncio.ensure_future(group.generate([[1]], 2, SamplingSettings()))  # occupies "slow"
        await asyncio.sleep(0)
        rest = [await group.generate([[1]], 1, SamplingSettings()) for _ in range(5)]
        slow.release.set()
        return await first, rest, slow, group

    first, rest, slow, group = asyncio.run(main())
    assert first == [["slow", "slow"]] and all(r == [["fast"]] for r in rest)
    assert (slow.calls, fast.calls) == (1, 5) and group.in_flight == [0, 0]


class AwaitingWeights(StandInReplica):
    """Refuses like a restarted engine until ``ready_after`` calls have been refused."""

    def __init__(self, name, ready_after):
        super().__init__(name, 0.0)
        replica, self.refused = self, 0

        class Method:
            async def remote(self, prompts, n, sampling):
                replica.calls += 1
                if replica.refused < ready_after:
                    replica.refused += 1
                    raise EngineNotReady("awaiting weights")
                return [[replica.name] * n for _ in prompts]

        self.generate = Method()


def test_a_replica_awaiting_weights_is_set_aside_and_the_request_served_elsewhere():
    down, up = AwaitingWeights("down", ready_after=10**6), StandInReplica("up", 0.0)
    group = EngineGroup([down, up], failover_s=5)

    async def main():
        return [await group.generate([[1]], 1, SamplingSettings()) for _ in range(4)]

    results = asyncio.run(main())
    assert all(r == [["up"]] for r in results) and down.calls == 1  # tried once, then set aside


def test_a_lone_replica_is_waited_for_until_it_has_weights_or_the_deadline():
    back = AwaitingWeights("back", ready_after=2)
    assert asyncio.run(EngineGroup([back], failover_s=30, retry_s=0.05).generate([[1]], 1, SamplingSettings())) \
        == [["back"]]
    never = EngineGroup([AwaitingWeights("never", ready_after=10**6)], failover_s=0.3, retry_s=0.05)
    with pytest.raises(EngineNotReady, match="no engine replica"):
        asyncio.run(never.generate([[1]], 1, SamplingSettings()))


def test_a_named_group_travels_as_names_and_finds_its_replicas_again(ray_local):
    """Sent to a restartable actor, a group of handles would put the actor's constructor arguments in the
    object store (Ray cannot promise them to a restart: ray-project/ray#53727); by name it is plain data,
    and a restarted actor finds the same replicas."""
    import pickle
    import uuid

    ray = ray_local

    @ray.remote(num_cpus=0)
    class Replica:
        def ping(self):
            return ray.get_runtime_context().get_actor_id()

    @ray.remote(num_cpus=0, max_restarts=1)
    class Holder:
        def __init__(self, engines):
            self.engines = engines

        def replica_ids(self):
            return ray.get([replica.ping.remote() for replica in self.engines.replicas]), self.engines.names

    names = [f"test-engine-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    replicas = [Replica.options(name=name).remote() for name in names]
    holder = None
    try:
        group = EngineGroup(replicas, failover_s=7.0, retry_s=0.5, names=names)
        assert group.__reduce__() == (EngineGroup.attach, (names, 7.0, 0.5))
        assert b"ActorHandle" not in pickle.dumps(group)
        expected = (ray.get([replica.ping.remote() for replica in replicas]), names)
        holder = Holder.remote(group)
        assert ray.get(holder.replica_ids.remote(), timeout=120) == expected
        ray.kill(holder, no_restart=False)  # restarted from its creation arguments
        deadline = time.monotonic() + 120
        while True:
            try:
                assert ray.get(holder.replica_ids.remote(), timeout=120) == expected
                break
            except ray.exceptions.RayActorError:
                assert time.monotonic() < deadline, "the holder did not come back"
                time.sleep(0.5)
    finally:
        for actor in (holder, *replicas):
            if actor is not None:
                ray.kill(actor)
