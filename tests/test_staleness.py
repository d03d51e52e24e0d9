"""Admission control and the group buffer, Ray-free: the staleness bound holds for every trained group
whatever the completion order, k = 0 is exactly the synchronous loop, and nothing deadlocks."""

import random

import pytest

from conductor.group_buffer import GroupBuffer
from conductor.rollout_record import RolloutRecord
from conductor.staleness import StalenessManager


def record(group: str, sample: int, version: int, reward: float = 1.0) -> RolloutRecord:
    return RolloutRecord(rollout_id=f"{group}-s{sample}", group_id=group, question_id="q", policy_version=version,
                         prompt_token_ids=[1], completion_token_ids=[2], completion_logprobs=[-0.1],
                         completion_text="x", format_ok=True, correct=True, reward=reward)


def simulate(k: int, q: int, steps: int, seed: int, max_delay: int, horizon: bool = False,
             leftover: list | None = None):
    """A discrete-time run: each admitted group is sampled at the engines' version and completes after a
    random delay; the learner takes Q groups (oldest first, dropping the too stale), trains, publishes.
    ``horizon``: the manager knows the run's steps. ``leftover`` gets the groups admitted and never trained."""
    rng = random.Random(seed)
    manager, buffer = StalenessManager(q, k, steps=steps if horizon else None), GroupBuffer()
    version, tick, in_flight, trained, counter = 1, 0, [], [], 0
    while len(trained) < steps:
        tick += 1
        for _ in range(manager.capacity()):
            counter += 1
            manager.start(1)
            in_flight.append((tick + rng.randint(0, max_delay), f"g{counter}", version))
        for done in [item for item in in_flight if item[0] <= tick]:
            in_flight.remove(done)
            buffer.add([record(done[1], s, done[2]) for s in range(2)])
        manager.discard(len(buffer.drop_older_than(manager.oldest_usable(version))))
        if len(buffer) >= q:
            groups = buffer.take(q)
            trained.append((version, [group[0].policy_version for group in groups]))
            version += 1
            manager.publish()
        assert tick < 100 * steps, "the run stalled"
    if leftover is not None:
        leftover.extend(item[1] for item in in_flight)
        leftover.extend(group[0].group_id for group in buffer.take(len(buffer)))
    return trained


@pytest.mark.parametrize("k", [0, 1, 2, 4])
@pytest.mark.parametrize("seed", range(5))
def test_no_trained_group_is_more_than_k_versions_behind(k, seed):
    for learner_version, versions in simulate(k, q=4, steps=40, seed=seed, max_delay=6):
        assert all(0 <= learner_version - v <= k for v in versions)


@pytest.mark.parametrize("k", [0, 1, 2, 4])
@pytest.mark.parametrize("seed", range(5))
def test_no_group_is_admitted_for_a_step_past_the_last(k, seed):
    """Knowing its steps, a run trains them all within the bound and leaves nothing admitted untrained; without,
    its last steps admit up to k steps' groups that nothing trains (paid for, in a real run)."""
    unpaid, wasted = [], []
    bounded = simulate(k, q=4, steps=30, seed=seed, max_delay=6, horizon=True, leftover=unpaid)
    assert len(bounded) == 30 and all(0 <= learner - v <= k for learner, versions in bounded for v in versions)
    assert unpaid == []
    simulate(k, q=4, steps=30, seed=seed, max_delay=6, leftover=wasted)
    assert (len(wasted) > 0) == (k > 0) and len(wasted) <= k * 4


def test_a_segment_with_no_steps_left_admits_nothing():
    assert StalenessManager(4, 2, steps=0).capacity() == 0
    assert StalenessManager(4, 2, steps=1).capacity() == 4  # the one step's groups, none ahead of it
    with pytest.raises(ValueError, match="steps"):
        StalenessManager(4, 2, steps=-1)


def test_k_zero_is_the_synchronous_loop():
    for learner_version, versions in simulate(0, q=3, steps=20, seed=1, max_delay=5):
        assert versions == [learner_version] * 3


def test_async_keeps_work_in_flight_while_training():
    manager = StalenessManager(groups_per_step=4, max_staleness=1)
    assert manager.capacity() == 8  # this step's groups and the next step's, from the start
    manager.start(8)
    assert manager.capacity() == 0
    manager.publish()  # trained on 4: four more may start at the new version
    assert manager.capacity() == 4
    manager.discard(2)  # two were too stale to train on: replaced
    assert manager.capacity() == 6
    with pytest.raises(RuntimeError, match="capacity"):
        manager.start(7)


def test_buffer_keeps_groups_whole_oldest_first_and_once():
    buffer = GroupBuffer()
    assert buffer.add([record("b", 0, 3), record("a", 0, 2), record("b", 1, 3), record("a", 1, 2)]) == 2
    assert buffer.add([record("a", 1, 2)]) == 0  # a rollout seen before is ignored
    assert [len(g) for g in buffer.take(5)] == [2, 2] and len(buffer) == 0
    buffer.add([record("old", 0, 1), record("new", 0, 4)])
    assert [g[0].group_id for g in buffer.drop_older_than(2)] == ["old"]
    assert [g[0].group_id for g in buffer.take(1)] == ["new"]
