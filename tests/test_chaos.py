"""The chaos monkey's step schedule: kills land after the configured steps, in kind order, up to the limit.
``ray.kill`` is replaced by a recorder: what is tested here is the schedule, not Ray (test_train_async
kills real actors)."""

import cluster.chaos as chaos_module
from cluster.chaos import ChaosMonkey
from conductor.config import ChaosConfig


def test_a_step_schedule_kills_the_next_kind_after_every_nth_step(monkeypatch):
    killed = []
    monkeypatch.setattr(chaos_module.ray, "kill", lambda handle, no_restart: killed.append((handle, no_restart)))
    config = ChaosConfig(kill=["engine", "learner"], every_steps=3)
    monkey = ChaosMonkey(config, {"engine": lambda: ["e0"], "learner": lambda: ["l0", "l1"]}).start()
    assert not monkey.thread.is_alive()  # no timer on a step schedule
    for step in range(1, 13):
        monkey.on_step(step)
    assert [kind for kind, _ in monkey.kills] == ["engine", "learner"]  # one round by default, then no more
    assert killed[0] == ("e0", False) and killed[1][0] in ("l0", "l1") and killed[1][1] is True


def test_a_kind_with_no_live_actor_is_skipped_without_counting(monkeypatch):
    monkeypatch.setattr(chaos_module.ray, "kill", lambda handle, no_restart: None)
    monkey = ChaosMonkey(ChaosConfig(kill=["pool"], every_steps=1, max_kills=2), {"pool": lambda: []})
    monkey.on_step(1)
    assert monkey.kills == []
