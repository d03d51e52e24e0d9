"""The training driver's Ray-free parts: splits and the resumable sampler, the trainer state's JSON
round trip, the log line and the learner config's validation."""

import json

import pytest

from cluster.train_report import log_line, validation_line
from cluster.train_state import TrainState
from conductor.config import LearnerConfig
from conductor.config_loader import ConfigError, load_config
from conductor.tasks.splits import TaskSampler, configured_splits, split_tasks, training_sampler, with_requeued
from conductor.tasks.toy import toy_tasks
from learner.learner_group import accumulation_steps


def test_splits_are_disjoint_and_deterministic():
    tasks = toy_tasks(50, seed=1)
    a, b = split_tasks(tasks, val=20, heldout=30, seed=3), split_tasks(tasks, val=20, heldout=30, seed=3)
    assert a == b
    ids = [{t.id for t in part} for part in (a.train, a.val, a.heldout)]
    assert [len(s) for s in ids] == [100, 20, 30]
    assert not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    with pytest.raises(ValueError, match="cannot give"):
        split_tasks(tasks[:40], val=20, heldout=30, seed=3)


def test_runs_over_seeds_share_their_splits_unless_the_split_seed_moves():
    tasks = toy_tasks(200, seed=0)
    first, second = (load_config(None, [f"seed={seed}"]) for seed in (0, 3))
    moved = load_config(None, ["train.split_seed=3"])
    assert configured_splits(tasks, first.train) == configured_splits(tasks, second.train)
    assert configured_splits(tasks, moved.train).heldout != configured_splits(tasks, first.train).heldout


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


def test_domain_weights_draw_by_weight_and_resume_to_the_same_questions():
    tasks = toy_tasks(40, seed=0)
    domains = sorted({t.domain for t in tasks})
    small = domains[0]
    tasks = [t for t in tasks if t.domain != small][:90] + [t for t in tasks if t.domain == small][:6]
    weights = {domain: 1.0 for domain in domains}
    straight = training_sampler(tasks, 7, weights, {})
    expected = [t.id for _ in range(30) for t in straight.next(8)]
    by_id = {t.id: t.domain for t in tasks}
    counts = {d: sum(by_id[task_id] == d for task_id in expected) for d in domains}
    assert all(abs(c / len(expected) - 1 / len(domains)) < 0.08 for c in counts.values()), counts  # 6 of 96 items
    small_ids = [task_id for task_id in expected if by_id[task_id] == small]
    assert set(small_ids) == {t.id for t in tasks if t.domain == small}  # its own epochs cover it
    first = training_sampler(tasks, 7, weights, {})
    got = [t.id for _ in range(11) for t in first.next(8)]
    state = json.loads(json.dumps(first.state()))       # through the checkpoint's JSON
    resumed = training_sampler(tasks, 7, weights, state)
    got += [t.id for _ in range(19) for t in resumed.next(8)]
    assert got == expected
    only = training_sampler(tasks, 7, dict(weights, **{small: 0.0}), {})
    assert all(by_id[t.id] != small for t in only.next(50))


@pytest.mark.parametrize("weighted", [False, True])
def test_a_resumed_sampler_draws_the_requeued_questions_first_then_continues(weighted):
    """The checkpoint names the questions admitted but not trained (cluster/group_collector.py sampler_state):
    drawn again first, in that order, across as many calls as they take, then the stream goes on; its own
    state names those still to draw, through the checkpoint's JSON."""
    tasks = toy_tasks(10, seed=0)
    weights = dict.fromkeys({t.domain for t in tasks}, 1.0) if weighted else None
    sampler = training_sampler(tasks, 7, weights, {})
    drawn = [t.id for t in sampler.next(5)]
    cursor = sampler.state()
    state = json.loads(json.dumps(with_requeued(cursor, drawn[3:] + ["gone-from-the-data"])))
    resumed = training_sampler(tasks, 7, weights, state)
    assert [t.id for t in resumed.next(1)] == drawn[3:4]
    assert resumed.state() == {**cursor, "requeue": drawn[4:]}
    plain = training_sampler(tasks, 7, weights, cursor)
    following = [t.id for t in plain.next(3)]
    assert [t.id for t in resumed.next(4)] == drawn[4:] + following
    assert resumed.state() == plain.state() and "requeue" not in plain.state()


def test_domain_weights_refuse_unnamed_domains_and_a_changed_setting_on_resume():
    tasks = toy_tasks(10, seed=0)
    domains = sorted({t.domain for t in tasks})
    with pytest.raises(ValueError, match="missing"):
        training_sampler(tasks, 0, {domains[0]: 1.0}, {})
    with pytest.raises(ValueError, match="unknown"):
        training_sampler(tasks, 0, dict.fromkeys(domains + ["poetry"], 1.0), {})
    with pytest.raises(ValueError, match="every weight is 0"):
        training_sampler(tasks, 0, dict.fromkeys(domains, 0.0), {})
    unweighted = training_sampler(tasks, 0, None, {})
    unweighted.next(3)
    with pytest.raises(ValueError, match="domain_weights changed"):
        training_sampler(tasks, 0, dict.fromkeys(domains, 1.0), unweighted.state())


def test_train_state_round_trips_and_reads_older_files():
    state = TrainState(step=3, version=4, history=[{"step": 1, "mean_reward": 0.5}], faults={"reissued": 2})
    restored = TrainState.from_json(state.to_json())
    assert restored == state
    older = dict(json.loads(state.to_json()), rng=[3, [1, 2], None])  # a driver RNG, as earlier versions saved
    assert TrainState.from_json(json.dumps(older)) == state


def test_log_line_names_the_step_and_phase_times():
    line = log_line({"step": 7, "version": 8, "mean_reward": 0.75, "accuracy": 0.5, "format_rate": 0.9,
                     "rollout_s": 1.25, "train_s": 0.5, "sync_s": 0.02, "infra_errors": 2})
    assert line.startswith("step    7 v8")
    for part in ("reward 0.750", "pass 0.50", "format 0.90", "rollout 1.2s", "sync 0.02s", "infra 2"):
        assert part in line


def test_validation_line_says_what_happened_to_the_kept_checkpoint():
    from conductor.rollout_summary import RolloutStats

    result = RolloutStats(rollouts=10, infra_errors=0, format_rate=1.0, accuracy=0.8, mean_reward=0.75,
                          steps_per_workflow=2.0, conductor_tokens_per_rollout=40, worker_tokens_per_rollout=2200,
                          cost_usd_per_rollout=0.01, domain_accuracy=0.7, domain_reward=0.65,
                          domain_worker_tokens=2300)
    kept = validation_line(result, kept=True, not_eligible=None, best_val=0.5, best_step=3)
    assert kept.startswith("  validation: accuracy 0.800 (0.700 over domains)") and kept.endswith("(best so far: kept)")
    assert "worker tokens 2,200 (2,300 over domains)" in kept
    behind = validation_line(result, kept=False, not_eligible=None, best_val=0.9, best_step=20)
    assert behind.endswith("(best 0.900 at step 20)")
    over = validation_line(result, kept=False, not_eligible="over the token budget", best_val=float("-inf"),
                           best_step=-1)
    assert over.endswith("(over the token budget; none kept yet)")


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


def test_a_step_row_keeps_the_keys_tools_read():
    from cluster.step_stats import StalenessStats, StepStats
    from conductor.rollout_summary import summarise
    from learner.train_batch import BatchStats, LearnerStats
    from tests.test_staleness import record

    records = [record("g", 0, version=3, reward=1.0), record("g", 1, version=2, reward=0.5)]
    learner = LearnerStats(loss=0.1, clip_fraction=0.0, mean_ratio=1.0, kl=0.0, grad_norm=0.5, lr=3e-4,
                           timings={"forward": 0.2, "backward": 0.3})
    stats = StepStats(step=7, version=4, rollouts=summarise(records), learner=learner,
                      batch=BatchStats(2, 0, 1, 0, 2, 2), staleness=StalenessStats.of(records, 3, dropped=1, refills=0),
                      timings={"rollout": 1.5, "train": 0.5, "sync": 0.05, "step": 2.1})
    row = stats.row()
    for key in ("step", "version", "mean_reward", "accuracy", "format_rate", "loss", "grad_norm", "lr",
                "rollout_s", "train_s", "sync_s", "step_s", "learner_forward_s", "max_lag", "stale_groups_dropped"):
        assert key in row, key
    assert row["max_lag"] == 1 and row["mean_lag"] == 0.5 and row["mean_reward"] == 0.75
    assert 0 < row["node_memory_gb"] < 10_000
    json.dumps(row)  # the history is JSON
    assert log_line(row).startswith("step    7 v4")


def test_run_throughput_takes_the_memory_peak_and_tokens_per_second():
    from cluster.step_stats import run_throughput

    history = [{"node_memory_gb": 9.5, "conductor_tokens_per_rollout": 40.0, "rollouts": 32},
               {"node_memory_gb": 12.25, "conductor_tokens_per_rollout": 60.0, "rollouts": 16}]
    assert run_throughput(history, 100.0) == {"node_memory_peak_gb": 12.25, "conductor_tokens_per_s": 22.4}
    assert run_throughput([], 0.0) == {"node_memory_peak_gb": None, "conductor_tokens_per_s": None}


def test_renamed_and_automatic_keys():
    with pytest.raises(ConfigError, match="renamed rollout.actors"):
        load_config(None, ["rollout.workers=2"])
    learner = load_config(None, []).learner
    assert learner.tis_cap == "auto"
    assert learner.resolved(asynchronous=True).tis_cap == 2.0 and learner.resolved(asynchronous=False).tis_cap is None
    assert load_config(None, ["learner.tis_cap=5"]).learner.resolved(asynchronous=False).tis_cap == 5.0
    with pytest.raises(ConfigError, match="tis_cap"):
        load_config(None, ["learner.tis_cap=-1"])


@pytest.fixture(params=["local", "s3"])
def run_output(request, tmp_path):
    from conductor.run_output import RunOutput

    if request.param == "local":
        return RunOutput(str(tmp_path / "runs"), "r")
    import s3fs

    server = request.getfixturevalue("s3_server")
    s3fs.S3FileSystem(**server.storage_options).mkdirs("runs", exist_ok=True)
    return RunOutput("s3://runs", tmp_path.name, server.storage_options)


class FakeLearners:
    """Stands in for the learner group (no DeepSpeed here): each "rank" uploads its files, as ranks do."""

    def __init__(self):
        self.loaded = []

    def save_checkpoint(self, out, tag, client_state):
        for rank in range(2):
            path = out.staged("checkpoints", tag, f"rank{rank}.pt")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(client_state))
        out.publish("checkpoints", tag)
        out.discard_staged("checkpoints", tag)

    def load_checkpoint(self, out, tag):
        self.loaded.append(json.loads((out.fetch("checkpoints", tag) / "rank1.pt").read_text()))


def test_checkpoints_keep_the_newest_and_load_back_on_local_disk_and_s3(run_output):
    from cluster.train_state import Checkpoints, TrainState

    checkpoints, learners = Checkpoints(run_output, keep=2), FakeLearners()
    assert checkpoints.latest() is None
    for step in (2, 4, 6):
        checkpoints.save(learners, TrainState(step=step, version=step + 1), f"step-{step}")
    checkpoints.save(learners, TrainState(step=4, version=5), "best")
    assert checkpoints.latest() == "step-6"
    assert run_output.list_dirs("checkpoints") == ["best", "step-4", "step-6"]  # step-2 pruned, best kept
    state = checkpoints.load(learners, "step-4")
    assert (state.step, state.version) == (4, 5) and learners.loaded == [{"policy_version": 5, "step": 4}]


def test_resume_trims_the_audit_log_and_a_fresh_run_moves_old_checkpoints_aside(run_output):
    from rich.console import Console

    from cluster.train_state import (
        TRAINED_LOG,
        append_trained,
        archive_previous_run,
        publish_trained,
        resume_trained_log,
    )

    for step in range(1, 7):
        append_trained(run_output, step, step, [])
    publish_trained(run_output)
    run_output.discard_staged()  # a new driver process: nothing staged
    resume_trained_log(run_output, last_step=4)  # steps 5 and 6 will be trained again after resuming from step-4
    lines = run_output.read_text(TRAINED_LOG).splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]
    append_trained(run_output, 5, 5, [])
    publish_trained(run_output)
    assert len(run_output.read_text(TRAINED_LOG).splitlines()) == 5

    run_output.write_text("checkpoints", "latest.json", text='{"tag": "step-4"}')
    run_output.write_text("sft", "config.json", text="{}")
    archive_previous_run(run_output, Console(quiet=True))
    assert not run_output.exists("checkpoints") and not run_output.exists(TRAINED_LOG)
    assert run_output.exists("sft", "config.json")
    [moved] = run_output.list_dirs("previous")
    assert run_output.exists("previous", moved, "checkpoints", "latest.json")
    assert run_output.exists("previous", moved, TRAINED_LOG)


def test_a_best_taken_on_another_basis_is_dropped_on_resume():
    from cluster.best_checkpoint import adopt_basis, selection_basis
    from cluster.train_state import TrainState

    plain, penalised = load_config(None, []), load_config(None, ["reward.cost_penalty_per_1k_worker_tokens=0.04"])
    assert selection_basis(plain) != selection_basis(penalised)
    assert selection_basis(load_config(None, ["train.best_by=accuracy"])) == "accuracy"
    fresh = TrainState()
    assert not adopt_basis(fresh, selection_basis(plain)) and fresh.best_basis == selection_basis(plain)
    state = TrainState(best_val=0.86, best_step=580, best_basis=selection_basis(plain))
    assert not adopt_basis(state, selection_basis(plain)) and state.best_step == 580   # same basis: kept
    assert adopt_basis(state, selection_basis(penalised))                              # a penalty added
    assert (state.best_val, state.best_step) == (-1.0, -1)
    older = TrainState.from_json('{"best_val": 0.8, "best_step": 40}')                # written before the field
    assert not adopt_basis(older, "accuracy") and older.best_step == 40


def test_a_best_saved_after_the_checkpoint_resumed_from_is_forgotten(run_output):
    """``best`` is one directory, overwritten: a segment killed after step 20's checkpoint may have saved step
    30's weights there, while the state resumed from still says step 10. Evaluating ``best`` then scored
    weights the state never validated, reported as step 10's."""
    from cluster.best_checkpoint import forget_a_later_best
    from cluster.train_state import Checkpoints

    checkpoints = Checkpoints(run_output, keep=2)
    assert checkpoints.saved_step("best") is None
    run_output.write_text("checkpoints", "best", "trainer_state.json", text=TrainState(step=30, best_step=30).to_json())
    assert checkpoints.saved_step("best") == 30
    resumed = TrainState(step=20, best_val=0.5, best_step=10)
    assert forget_a_later_best(resumed, checkpoints.saved_step("best"))
    assert (resumed.best_val, resumed.best_step) == (-1.0, -1)
    matching = TrainState(step=40, best_val=0.9, best_step=30)
    assert not forget_a_later_best(matching, 30) and matching.best_step == 30


def test_the_format_guard_counts_consecutive_low_steps():
    from cluster.train_state import TrainState

    state = TrainState()
    assert [state.format_collapsed(rate, 0.3, 2) for rate in (0.1, 0.5, 0.1, 0.2, 0.9)] == [
        False, False, False, True, False]


def test_a_resumed_best_is_voided_for_either_reason_and_said_why():
    from cluster.best_checkpoint import void_best

    kept = TrainState(step=40, best_val=0.9, best_step=30, best_basis="accuracy")
    assert void_best(kept, "accuracy", 30) is None and kept.best_step == 30
    overwritten = TrainState(step=20, best_val=0.5, best_step=10, best_basis="accuracy")
    assert "written after the one resumed from" in void_best(overwritten, "accuracy", 30)
    assert overwritten.best_step == -1
    rebased = TrainState(step=20, best_val=0.5, best_step=10, best_basis="accuracy")
    assert "train.best_by or the reward changed" in void_best(rebased, "reward", 10) and rebased.best_step == -1
