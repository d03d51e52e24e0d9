"""The driver's pool meters (cluster/pool_meters.py) read one snapshot per boundary and share it: the spend,
the response cache's figures and the training spans. Driven here by a pool whose counters the test sets (the
real RayPool is read the same way in the slow driver tests); a restarted or silent actor is the fault a
test cannot time against a real actor, so it is produced by the counters themselves."""

from __future__ import annotations

import pytest

from cluster.cache_meter import CacheMeter
from cluster.pool_meters import PoolMeters
from cluster.run_spend import RunSpend
from cluster.train_state import TrainState
from conductor.config_loader import load_config
from conductor.counter_rises import CounterRises, summed
from conductor.pool_utilisation import COUNTERS
from conductor.run_output import RunOutput
from tests.support.toy_warm_start import TOY_CONFIG


def test_counter_rises_take_the_first_reading_as_zero_and_a_lower_one_as_a_restart():
    rises = CounterRises()
    assert rises.read({"a": {"n": 5.0}}) == {"a": {"n": 0.0}}
    assert rises.read({"a": {"n": 7.0}, "b": {"n": 3.0}}) == {"a": {"n": 2.0}, "b": {"n": 0.0}}
    assert rises.read({"b": {"n": 4.0}}) == {"b": {"n": 1.0}}  # a did not answer: not read
    assert rises.read({"a": {"n": 1.0}}) == {"a": {"n": 1.0}}  # a restarted: counts from zero
    assert summed(rises.total) == {"n": 4.0}


def cache(hits: int, misses: int, saved: float = 0.0) -> dict:
    return {"cache": {"hits": hits, "misses": misses, "stored": misses, "uncacheable": 0, "identical": hits,
                      "saved_usd": saved, "mode": "read-write"}}


def test_cache_meter_sums_providers_and_survives_a_restart_and_a_silent_actor():
    meter = CacheMeter(enabled=True)
    meter.read({"p": cache(0, 0), "q": cache(0, 0)})
    assert meter.step({"p": cache(3, 1), "q": cache(0, 4)}) == {
        "cache_hits": 3, "cache_misses": 5, "cache_identical": 3, "cache_hit_rate": 3 / 8}
    assert meter.step({"q": cache(2, 4)}) == {"cache_hits": 2, "cache_misses": 0, "cache_identical": 2,
                                              "cache_hit_rate": 1.0}
    assert meter.step({"p": cache(1, 0), "q": cache(2, 4)})["cache_hits"] == 1  # p restarted
    summary = meter.summary({"p": cache(1, 0), "q": cache(2, 4, saved=0.5)})["response_cache"]
    assert (summary["hits"], summary["misses"], summary["calls"], summary["saved_usd"]) == (6, 5, 11, 0.5)
    assert summary["mode"] == "read-write" and isinstance(summary["hits"], int)
    assert CacheMeter(enabled=False).step({"p": cache(1, 1)}) == {}


class CountingPool:
    """RayPool's ``stats`` over counters the test moves; counts how often it was read."""

    def __init__(self):
        self.reads = 0
        self.clock = 0.0
        self.cost = 0.0
        self.attempts = 0.0

    def advance(self, seconds: float, cost: float, attempts: float) -> None:
        self.clock += seconds
        self.cost += cost
        self.attempts += attempts

    def stats(self, allow_unavailable: bool = False, timeout_s: float = 10.0) -> dict:
        assert allow_unavailable, "the meters must not wait on, or fail with, a restarting actor"
        self.reads += 1
        counters = dict.fromkeys(COUNTERS, 0.0)
        counters.update(attempts=self.attempts, calls=self.attempts)
        return {"sim": {**counters, "cost_usd": self.cost, "clock_s": self.clock, "configured_rpm": 60.0,
                        "tpm": None, "rate_window_s": 60.0, **cache(0, int(self.attempts))}}


def test_one_reading_per_boundary_feeds_the_spend_the_cache_and_the_training_spans(tmp_path):
    config = load_config(TOY_CONFIG, ["train.steps=4", "train.eval_every=2"])
    pool = CountingPool()
    spend = RunSpend(config, RunOutput(str(tmp_path), "run"))
    spend.add({"sim": 0.125}, phase="warm_start")  # the warm start's measured menu
    spend.add({"sim": 0.25}, {"sim": 0.5}, phase="baselines")  # with an attempt whose bill is unknown
    meters = PoolMeters(pool, spend, caching=True, val_questions=6, heldout_questions=6)
    state = TrainState()
    meters.resume_training()
    for step in (1, 2):
        pool.advance(10, 1.0, 20)
        state.step = step
        row = meters.step_row(state)
        state.history.append(dict(row, step=step))
        assert row["step_cost_usd"] == pytest.approx(1.0) and row["cache_misses"] == 20
    assert pool.reads == 3  # the first reading, then one per step
    with meters.validation() as cost:
        pool.advance(100, 0.5, 50)  # a validation: its cost is its own, its time is not training's
    assert cost == pytest.approx({"sim": 0.5}) and pool.reads == 5
    pool.advance(10, 1.0, 20)
    state.step = 3
    assert meters.step_row(state)["step_cost_usd"] == pytest.approx(1.0)
    assert meters.stop_before_next(state) is None and pool.reads == 6  # no caps; no reading of its own
    summary = meters.summary(state, None)
    assert summary["spent_usd"] == pytest.approx(3.875) and summary["unsettled_usd_max"] == pytest.approx(0.5)
    assert summary["segment_spend_usd"] == pytest.approx(
        {"warm_start": 0.125, "baselines": 0.25, "training_steps": 3.0, "validations": 0.5, "closing": 0.0})
    training = summary["training_pool"]["sim"]
    assert (training["seconds"], training["attempts"]) == (30.0, 60.0)  # the validation's 100 s left out
    assert summary["response_cache"]["misses"] == 110


def test_a_capped_run_checks_a_fresh_reading_and_stops_before_a_held_out_evaluation_it_cannot_pay(tmp_path):
    """The cap's checks read the pool first: a step dropped when the learner group was rebuilt was paid for all
    the same, and a resumed segment whose cap is spent must not pay for the held-out evaluation again."""
    from conductor.spend_cap import SetupStopped

    config = load_config(TOY_CONFIG, ["budget.max_usd=10", "train.max_staleness=0", "train.steps=20",
                                      "train.eval_every=100"])
    pool = CountingPool()
    meters = PoolMeters(pool, RunSpend(config, RunOutput(str(tmp_path), "run")), caching=False,
                        val_questions=0, heldout_questions=1)
    state = TrainState()
    for step in (1, 2, 3):  # $2 a step, 64 rollouts: the held-out question is priced at 2/64
        pool.advance(10, 2.0, 64)
        state.step = step
        state.history.append(dict(meters.step_row(state), step=step))
    assert meters.stop_before_next(state) is None  # 6 + 1.5 x (2 + 2/64) <= 10
    reads = pool.reads
    pool.advance(10, 2.0, 64)  # step 4's rollouts, paid; its learner step lost, so no step row read them
    stop = meters.stop_before_next(state)
    assert pool.reads == reads + 1 and stop is not None and stop.before_step == 4
    assert stop.spent == pytest.approx(8.0)  # not the 6.0 of the last step's reading
    meters.check_heldout(state)  # 8 + 1.5 x 2/64 <= 10: the reserve the loop kept is there
    pool.advance(10, 1.99, 64)
    with pytest.raises(SetupStopped) as stopped:
        meters.check_heldout(state)
    line = str(stopped.value)
    assert "stopped before the held-out evaluation" in line and "has spent $9.9900 of $10.0000" in line
    assert "train.heldout_questions" in line and "setup_cost" not in line
