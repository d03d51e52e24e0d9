"""RolloutFeed on a real Ray cluster: a request whose actor is killed mid-flight is issued again, with the
same batch id, and completes; a request that fails inside the actor is given up and reported, not
retried forever. The actors here stand in for RolloutActor (same ``run(request)`` contract) so that the
kill lands at a known moment; the real actor is killed under chaos in tests/test_train_async.py."""

import os
import time

import pytest
import ray

from cluster.rollout_feed import RolloutFeed
from conductor.pool import ReplayMiss
from conductor.rollout import RolloutReceipt, RolloutRequest

pytestmark = pytest.mark.slow


@ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0)
class SlowRolloutActor:
    def __init__(self):
        self.calls = []

    def run(self, request: RolloutRequest) -> RolloutReceipt:
        self.calls.append(request.batch_id)
        if request.batch_id.startswith("broken"):
            raise ValueError("the store is unreachable")
        if request.batch_id.startswith("replay"):
            raise ReplayMiss("pool.cache is replay-only and holds no answer for worker w")
        time.sleep(float(request.batch_id.rsplit("-", 1)[-1]))
        return RolloutReceipt(request.batch_id, groups=len(request.tasks), versions=(os.getpid(),))

    def pid(self) -> int:
        return os.getpid()


def test_a_request_on_a_killed_actor_is_issued_again_and_completes(ray_local):
    actors = [SlowRolloutActor.remote(), SlowRolloutActor.remote()]
    pids = ray.get([actor.pid.remote() for actor in actors])
    feed = RolloutFeed(actors, retry_pause_s=0.2)
    feed.submit(RolloutRequest("slow-5", ()))
    feed.submit(RolloutRequest("quick-0", ()))
    time.sleep(1.0)
    ray.kill(actors[0], no_restart=False)  # the least-loaded choice put "slow-5" on actor 0
    receipts, deadline = [], time.monotonic() + 60
    while feed.busy and time.monotonic() < deadline:
        receipts += feed.poll(timeout_s=1.0)
    assert sorted(r.batch_id for r in receipts) == ["quick-0", "slow-5"]
    assert feed.counters.reissued == 1 and not feed.take_given_up()
    slow = next(r for r in receipts if r.batch_id == "slow-5")
    assert slow.versions[0] != pids[0]  # finished by another process than the one killed


def test_a_request_failing_inside_the_actor_is_given_up_once(ray_local):
    feed = RolloutFeed([SlowRolloutActor.remote()], retry_pause_s=0.2)
    feed.submit(RolloutRequest("broken-0", ()))
    deadline = time.monotonic() + 30
    while feed.busy and time.monotonic() < deadline:
        feed.poll(timeout_s=1.0)
    assert [r.batch_id for r in feed.take_given_up()] == ["broken-0"] and feed.counters.reissued == 0
    with pytest.raises(RuntimeError, match="failed"):
        feed.run([RolloutRequest("broken-1", (), return_records=True)])


def test_a_replay_miss_inside_the_actor_stops_the_feed_with_its_message(ray_local):
    """Unlike any other failure inside the actor (given up, its groups replaced), a replay-only cache miss
    ends the run: the feed raises it, as the driver's ``main`` reports it."""
    feed = RolloutFeed([SlowRolloutActor.remote()])
    feed.submit(RolloutRequest("replay-0", ()))
    with pytest.raises(ReplayMiss, match="holds no answer for worker w"):
        for _ in range(60):
            feed.poll(timeout_s=1.0)
    assert not feed.take_given_up()


@ray.remote(num_cpus=0)
class GatedRolloutActor:
    """Draws its completions once ``release("draw")`` opens that gate, then finishes once ``release("finish")``
    opens the other, as a real rollout actor draws and then waits on its workers."""

    def __init__(self):
        import asyncio

        self.gates, self.drawn = {"draw": asyncio.Event(), "finish": asyncio.Event()}, set()

    async def run(self, request: RolloutRequest) -> RolloutReceipt:
        await self.gates["draw"].wait()
        self.drawn.add(request.batch_id)
        await self.gates["finish"].wait()
        return RolloutReceipt(request.batch_id, groups=len(request.tasks), versions=(0,))

    def sampled(self, batch_ids: list[str]) -> list[bool]:
        return [batch_id in self.drawn for batch_id in batch_ids]

    def release(self, gate: str) -> None:
        self.gates[gate].set()


def test_weights_wait_until_the_requests_in_flight_have_drawn_their_completions(ray_local):
    """A replayable run publishes only after ``wait_sampled``: a request not yet sampled holds it (until the
    timeout, which it reports); one that has sampled, and still waits on its workers, does not."""
    actor = GatedRolloutActor.remote()
    feed = RolloutFeed([actor])
    assert feed.wait_sampled(timeout_s=0.1)  # nothing in flight
    feed.submit(RolloutRequest("gated-0", ()))
    cared = []
    assert not feed.wait_sampled(timeout_s=0.5, on_wait=lambda: cared.append(1))
    assert cared  # the driver's actor care ran while it waited
    ray.get(actor.release.remote("draw"))
    assert feed.wait_sampled(timeout_s=60)
    assert feed.busy and not feed.poll(timeout_s=0.1)  # sampled, not finished: the wait did not need the receipt
    ray.get(actor.release.remote("finish"))
    receipts, deadline = [], time.monotonic() + 60
    while feed.busy and time.monotonic() < deadline:
        receipts += feed.poll(timeout_s=1.0)
    assert [r.batch_id for r in receipts] == ["gated-0"] and "gated-0" in feed.came_back


def test_drain_waits_for_the_requests_in_flight_up_to_its_timeout(ray_local):
    """A segment's end lets the requests admitted for later steps come back (cluster/grpo_recipe.py): drain
    returns once none is out, or says how many still are when its time is up."""
    gated = GatedRolloutActor.remote()
    feed = RolloutFeed([gated, SlowRolloutActor.remote()])
    assert feed.drain(timeout_s=0.1) == 0  # nothing in flight
    feed.submit(RolloutRequest("gated-0", ()))  # the least loaded: the gated actor first
    feed.submit(RolloutRequest("quick-0", ()))
    cared, deadline = [], time.monotonic() + 60
    while "quick-0" not in feed.came_back and time.monotonic() < deadline:
        assert feed.drain(timeout_s=0.5, on_wait=lambda: cared.append(1)) >= 1  # the gated one is held
    assert "quick-0" in feed.came_back and cared
    assert feed.drain(timeout_s=0.5) == 1 and "gated-0" not in feed.came_back
    for gate in ("draw", "finish"):
        ray.get(gated.release.remote(gate))
    assert feed.drain(timeout_s=60) == 0 and "gated-0" in feed.came_back


@ray.remote(num_cpus=0)
class EchoRolloutActor:
    """Answers each question with one record that carries the request's cost-dial setting."""

    def run(self, request: RolloutRequest) -> RolloutReceipt:
        from conductor.rollout_record import RolloutRecord

        records = [RolloutRecord(rollout_id=f"{group_id}-s0", group_id=group_id, question_id=task.id, policy_version=0,
                                 prompt_token_ids=[1], completion_token_ids=[2], completion_logprobs=[-0.1],
                                 completion_text="x", format_ok=True, correct=True, reward=1.0,
                                 cost_quality=request.cost_quality)
                   for group_id, task in zip(request.group_ids(), request.tasks)]
        return RolloutReceipt(request.batch_id, len(records), (0,), records)


def test_evaluation_at_several_settings_scores_every_question_once_at_each(ray_local):
    from conductor.rollout import SamplingSettings
    from conductor.tasks.task import Task

    tasks = [Task(id=f"t{i}", domain="math", prompt=f"q{i}", answer="1", verifier="exact") for i in range(5)]
    feed = RolloutFeed([EchoRolloutActor.remote(), EchoRolloutActor.remote()], retry_pause_s=0.2)
    records = feed.evaluate(tasks, SamplingSettings(0.0), "val-1", settings=(0, 5, 10))
    assert sorted((r.question_id, r.cost_quality) for r in records) == sorted(
        (task.id, setting) for task in tasks for setting in (0, 5, 10))
    assert len({r.rollout_id for r in records}) == 15
    plain = feed.evaluate(tasks, SamplingSettings(0.0), "val-2")
    assert sorted(r.question_id for r in plain) == [task.id for task in tasks]
    assert {r.cost_quality for r in plain} == {None}
