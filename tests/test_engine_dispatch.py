"""Least-loaded dispatch over engine replicas. The replicas here are stand-ins for actor handles (two
real vLLM replicas do not fit this 2-core machine next to the rest of the suite); the real engine actor
is covered by tests/test_rollouts_ray.py."""

import asyncio

from actors.conductor_engine import EngineGroup
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


def test_calls_go_to_the_replica_with_fewest_in_flight():
    slow, fast = StandInReplica("slow", 0.3), StandInReplica("fast", 0.01)
    group = EngineGroup([slow, fast])

    async def main():
        first = asyncio.ensure_future(group.generate([[1]], 2, SamplingSettings()))  # occupies "slow"
        await asyncio.sleep(0)
        rest = [await group.generate([[1]], 1, SamplingSettings()) for _ in range(5)]
        return await first, rest

    first, rest = asyncio.run(main())
    assert first == [["slow", "slow"]] and all(r == [["fast"]] for r in rest)
    assert (slow.calls, fast.calls) == (1, 5) and group.in_flight == [0, 0]
