"""The spend cap and the cost forecast without Ray: the meter over the pool's counters and its ledger, the
forecast's formula, the stop rule on a simulated run, and the ``budget`` section's checks. The driver's
wiring, end to end: tests/test_train_driver.py."""

import pytest

from conductor.config_loader import load_config
from conductor.cost_forecast import CostHistory, RunShape, forecast, heldout_estimate
from conductor.run_output import RunOutput
from conductor.spend_cap import HEADROOM, budget_stop, next_step_cost, setup_stop
from conductor.spend_meter import SpendMeter, read_ledger, read_unsettled, write_ledger
from tests.support.toy_warm_start import TOY_CONFIG

SHAPE = RunShape(steps=20, eval_every=5, val_questions=10, heldout_questions=40, rollouts_per_step=8)


def test_the_meter_counts_counter_rises_carries_earlier_segments_and_survives_a_restarted_counter(tmp_path):
    meter = SpendMeter({"a": 1.0})
    meter.read({"a": 5.0, "b": 0.0})  # the zero point: an attached actor may have counted before this run
    meter.add({"b": 0.25})            # the baselines' in-process pool
    meter.read({"a": 5.5, "b": 1.0})
    assert meter.spent() == pytest.approx({"a": 1.5, "b": 1.25})
    meter.read({"a": 0.2, "b": 1.0})  # a's actor restarted: its counter began again at zero
    assert meter.spent() == pytest.approx({"a": 1.7, "b": 1.25}) and meter.total == pytest.approx(2.95)

    out = RunOutput(str(tmp_path), "run")
    assert read_ledger(out) == {}
    write_ledger(out, meter.spent())
    assert read_ledger(out) == pytest.approx(meter.spent())


def test_attempts_whose_bill_is_unknown_count_against_a_cap_at_their_worst_case(tmp_path):
    """A timed-out attempt is in no bill the pool saw: the pool counts it at its worst case (unsettled_usd),
    and the cap is kept on what the run can have been billed, carried across segments by the ledger."""
    meter = SpendMeter({"p": 1.0}, {"p": 0.25})
    meter.read({"p": 0.0}, None, {"p": 0.0})
    meter.read({"p": 2.0}, None, {"p": 0.5})
    assert meter.spent() == pytest.approx({"p": 3.0}) and meter.at_most() == pytest.approx({"p": 3.75})
    out = RunOutput(str(tmp_path), "run")
    write_ledger(out, meter.spent(), meter.unsettled_total())
    assert read_unsettled(out) == pytest.approx({"p": 0.75}) and read_ledger(out) == pytest.approx({"p": 3.0})
    caps = {None: 3.5}
    assert setup_stop(caps, meter.spent(), {"p": 0.3}, "x") is None  # the bills alone would leave room
    assert setup_stop(caps, meter.at_most(), {"p": 0.3}, "x") is not None


def test_a_restart_that_outspent_the_last_reading_is_told_by_its_incarnation():
    """Without the incarnation a new actor that has already counted past the old one's last reading looks
    like an ordinary rise, and the dead actor's spend drops out of the ledger and the cap."""
    meter = SpendMeter()
    meter.read({"p": 0.0}, {"p": "first"})
    meter.read({"p": 10.0}, {"p": "first"})
    meter.read({"p": 15.0}, {"p": "second"})  # restarted, and spent 15 before this reading
    assert meter.total == pytest.approx(25.0)
    meter.read({"p": 16.0}, {"p": "second"})
    assert meter.total == pytest.approx(26.0)


def test_the_forecast_is_the_formula_with_a_range_one_spread_wide():
    history = CostHistory.of([{"step_cost_by_provider": {"p": cost}} for cost in (0.8, 1.2, 1.0, 1.0)],
                             [{"val_cost_by_provider": {"p": 0.5}}])
    assert forecast(2.0, CostHistory(history.steps[:1]), 1, SHAPE) is None  # one step: no spread yet
    expected = forecast(10.0, history, 4, SHAPE)
    # 16 steps left at the mean 1.0; validations after steps 5, 10, 15, 20 at the last one's 0.5; the held-out
    # evaluation at 0.5 / 10 validation questions x 40 held-out questions
    rest = 16 * 1.0 + 4 * 0.5 + 0.05 * 40
    spread = 0.16329931618554522  # the sample standard deviation of 0.8, 1.2, 1.0, 1.0
    assert expected.mid == pytest.approx(10.0 + rest)
    assert (expected.low, expected.high) == pytest.approx((10.0 + rest * (1 - spread), 10.0 + rest * (1 + spread)))
    # made at step 5, between the step and its validation: that validation is still to pay for
    assert forecast(10.0, history, 5, SHAPE).mid == pytest.approx(10.0 + 15 * 1.0 + 4 * 0.5 + 0.05 * 40)
    # before any validation the held-out questions are priced as sampled rollouts: 1.0 a step / 8 rollouts
    assert heldout_estimate(CostHistory(history.steps), SHAPE) == pytest.approx({"p": 40 / 8})


def test_a_run_under_a_cap_stops_before_the_step_that_would_pass_it_and_ends_within_it():
    """A run of steps of known cost, checked as cluster/grpo_recipe.py does before every step: it stops with
    room left for its closing held-out evaluation, and a raised cap lets it go on from there."""
    costs = [1.0, 1.3, 0.9, 1.1, 1.2, 1.0, 0.95, 1.25] * 3
    shape = RunShape(steps=24, eval_every=100, val_questions=0, heldout_questions=8, rollouts_per_step=8)

    def run(cap, history=(), spent=0.0):
        done = len(history)
        while done < shape.steps:
            stop = budget_stop({None: cap}, {"p": spent}, CostHistory(tuple(history)), done, shape)
            if stop:
                return stop, list(history), spent
            spent += costs[done]
            history = [*history, {"p": costs[done]}]
            done += 1
        return None, list(history), spent

    stop, history, spent = run(cap=12.0)
    assert stop is not None and stop.provider is None and stop.before_step == len(history) + 1
    heldout = heldout_estimate(CostHistory(tuple(history)), shape)["p"]  # 8 questions x a rollout's mean cost
    assert spent + heldout <= 12.0 < spent + HEADROOM * (stop.next_step + stop.reserve)
    assert stop.next_step == max(costs[len(history) - 5:len(history)])  # the largest of the last five
    assert "budget: stopped before step" in stop.line() and "budget.max_usd" in stop.line()
    assert stop.summary()["stopped"] == "budget"

    resumed, history, spent = run(cap=40.0, history=history, spent=spent)
    assert resumed is None and len(history) == 24 and spent == pytest.approx(sum(costs))


def test_the_projection_adds_a_due_validation_and_the_async_steps_admitted_beside():
    history = CostHistory(({"p": 1.0, "q": 0.5}, {"p": 2.0, "q": 0.1}), ({"p": 0.3, "q": 0.2},))
    assert next_step_cost(history, 2, SHAPE) == pytest.approx({"p": 2.0, "q": 0.5, None: 2.1})
    assert next_step_cost(history, 4, SHAPE) == pytest.approx({"p": 2.3, "q": 0.7, None: 2.6})  # step 5 validates
    async_shape = RunShape(20, 5, 10, 40, 8, max_staleness=2)
    assert next_step_cost(history, 2, async_shape)[None] == pytest.approx(3 * 2.1)
    # none admitted past the last step: step 19 has one later step beside it, step 20 none (and validates)
    assert next_step_cost(history, 18, async_shape)[None] == pytest.approx(2 * 2.1)
    assert next_step_cost(history, 19, async_shape)[None] == pytest.approx(2.1 + 0.5)


def test_a_provider_cap_stops_the_run_by_that_provider_and_a_spent_cap_stops_before_any_projection():
    history = CostHistory(({"p": 1.0, "q": 0.5},))
    stop = budget_stop({None: 100.0, "q": 1.0}, {"p": 1.0, "q": 0.5}, history, 1, SHAPE)
    assert stop.provider == "q" and "budget.max_usd_per_provider.q" in stop.line()
    assert budget_stop({None: 100.0, "q": 100.0}, {"p": 1.0, "q": 0.5}, history, 1, SHAPE) is None
    # a fresh run has nothing to project from: step 1 runs unless the cap is spent already (the baselines)
    assert budget_stop({None: 1.0}, {"p": 0.9}, CostHistory(), 0, SHAPE) is None
    assert budget_stop({None: 1.0}, {"p": 1.0}, CostHistory(), 0, SHAPE).before_step == 1


def test_the_budget_section_checks_its_providers_and_values_at_load():
    config = load_config(TOY_CONFIG, ["budget.max_usd=2.5", "budget.max_usd_per_provider={sim: 1.0}"])
    assert config.budget.caps() == {None: 2.5, "sim": 1.0}
    with pytest.raises(ValueError, match=r"budget.max_usd_per_provider names unknown providers \['openai'\]"):
        load_config(TOY_CONFIG, ["budget.max_usd_per_provider={openai: 1.0}"])
    with pytest.raises(ValueError, match="budget.max_usd"):
        load_config(TOY_CONFIG, ["budget.max_usd=0"])


def test_a_measurement_before_the_loop_is_stopped_when_its_estimate_would_pass_a_cap():
    """conductor/spend_cap.py's setup rule: S + 1.5 x E against each cap, the whole run's first."""
    assert setup_stop({None: 10.0}, {"sim": 3.0}, {"sim": 4.0}, "the held-out baselines") is None  # 3 + 6 <= 10
    stop = setup_stop({None: 10.0}, {"sim": 3.0}, {"sim": 5.0}, "the held-out baselines")        # 3 + 7.5 > 10
    assert stop is not None and (stop.provider, stop.spent, stop.estimate, stop.cap) == (None, 3.0, 5.0, 10.0)
    assert "stopped before the held-out baselines" in stop.line() and "budget.max_usd)" in stop.line()
    by_provider = setup_stop({"b": 2.0, None: 100.0}, {"a": 1.0}, {"a": 1.0, "b": 1.5}, "the menu")
    assert by_provider is not None and by_provider.provider == "b" and "max_usd_per_provider.b" in by_provider.line()
    assert setup_stop({None: 1.0}, {"sim": 1.0}, {}, "x") is not None  # a spent cap stops even a free measurement
    assert setup_stop({}, {"sim": 1e9}, {"sim": 1e9}, "x") is None    # no cap, no stop
