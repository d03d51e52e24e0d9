"""The training driver's Ray-free parts: splits and the resumable sampler, the trainer state's JSON
round trip (including the driver's RNG), the log line and the learner config's validation."""

import random

import pytest

from cluster.train_report import log_line
from cluster.train_state import TrainState
from conductor.config import ConfigError, load_config
from conductor.tasks.splits import TaskSampler, split_tasks
from conductor.tasks.toy import toy_tasks
from learner.learner_group import accumulation_steps
from conductor.config import LearnerConfig


def test_splits_are_disjoint_and_deterministic():
    tasks = toy_tasks(50, seed=1)
    a, b = split_tasks(tasks, val=20, heldout=30, seed=3), split_tasks(tasks, val=20, heldout=30, seed=3)
    assert a == b
    ids = [{t.id for t in part} for part in (a.train, a.val, a.heldout)]
    assert [len(s) for s in ids] == [100, 20, 30]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    with pytest.raises(ValueError, match="cannot give"):
        split_tasks(tasks[:40], val=20, heldout=30, seed=3)


def test_sampler_resumes_to_the_same_questions_across_epochs():
    tasks = toy_tasks(5, seed=0)  # 15 tasks: every 4th batch crosses an epoch
    straight = TaskSampler(tasks, seed=7)
    expected = [straight.next(4) for _ in range(8)]
    first = TaskSampler(tasks, seed=7)
    got = [first.next(4) for _ in range(3)]
    resumed = TaskSampler(tasks, seed=7, **first.state())
    got += [resumed.next(4) for _ in range(5)]
    assert got == expected
    epoch = [t.id for batch in expected for t in batch][:15]
    assert sorted(epoch) == sorted(t.id for t in tasks)  # each epoch covers every task once


def test_train_state_round_trips_with_the_rng():
    rng = random.Random(5)
    rng.random()
    state = TrainState(step=3, version=4, history=[{"step": 1, "mean_reward": 0.5}], rng=rng.getstate())
    restored = TrainState.from_json(state.to_json())
    other = random.Random()
    other.setstate(restored.rng)
    assert other.random() == rng.random()
    assert restored.step == 3 and restored.history == state.history


def test_log_line_names_the_step_and_phase_times():
    line = log_line({"step": 7, "version": 8, "mean_reward": 0.75, "accuracy": 0.5, "format_rate": 0.9,
                     "rollout_s": 1.25, "train_s": 0.5, "sync_s": 0.02, "infra_errors": 2})
    assert line.startswith("step    7 v8")
    for part in ("reward 0.750", "pass 0.50", "format 0.90", "rollout 1.2s", "sync 0.02s", "infra 2"):
        assert part in line


def test_learner_config_rejects_bad_values_with_their_path():
    with pytest.raises(ConfigError, match=r"learner\.zero_stage"):
        load_config(overrides=["learner.zero_stage=4"])
    with pytest.raises(ConfigError, match=r"learner\.weight_sync"):
        load_config(overrides=["learner.weight_sync=carrier_pigeon"])
    with pytest.raises(ConfigError, match=r"train\.format_floor"):
        load_config(overrides=["train.format_floor=1.5"])


def test_accumulation_covers_a_full_step():
    config = LearnerConfig(ranks=2, micro_batch_size=8, mini_batches=2)
    assert accumulation_steps(config, 64) == 2  # 64 sequences / 2 ranks / 2 mini-batches / 8 per micro
    assert accumulation_steps(LearnerConfig(micro_batch_size=32), 64) == 2
    assert accumulation_steps(LearnerConfig(micro_batch_size=32), 1) == 1
