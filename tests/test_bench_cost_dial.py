"""bench/cost_dial.py's verdict on the dial against the policies trained at fixed weights: the bar (1.5 points
and 15% of cost, or dominating), judged on seed means with every pair listed, and each row's held-out reward
at its own weight. The dial itself: tests/test_cost_dial.py."""

import pytest


def test_the_bench_verdict_needs_workflows_that_ran_and_then_applies_the_bar():
    from bench.cost_dial import NAMED_SETTINGS, points

    def report(dial_accuracy: float, calls: float) -> dict:
        methods = {}
        for setting in NAMED_SETTINGS.values():
            for kind, accuracy in (("dial", dial_accuracy), ("fixed", 0.5)):
                methods[f"conductor_{kind}_q{setting}"] = {"average": {
                    "accuracy": accuracy * bool(calls), "usd": 0.01 * bool(calls), "worker_tokens": 100 * calls,
                    "worker_calls": calls}}
        return {"methods": methods}

    assert points(report(0.51, 2.0), (0.0, 20.0))["meets_bar"]
    assert not points(report(0.45, 2.0), (0.0, 20.0))["meets_bar"]  # 5 points below, at the same cost
    idle = points(report(0.5, 0.0), (0.0, 20.0))  # nothing ran: 0 accuracy at $0 on both sides
    assert not idle["meets_bar"] and "called no worker" in idle["no_verdict"]


def test_a_dial_exactly_at_the_bars_edges_is_within_it():
    """1.5 points and 15% of cost are inside the bar; floating point put them a hair outside."""
    from bench.cost_dial import verdict

    edge = verdict({"accuracy": 0.80, "usd": 0.0085}, {"accuracy": 0.815, "usd": 0.01})
    assert edge["accuracy_points"] == -1.5 and edge["within"] and edge["meets_bar"]
    assert not verdict({"accuracy": 0.80, "usd": 0.0084}, {"accuracy": 0.815, "usd": 0.01})["within"]


def test_the_bench_judges_the_bar_on_the_seed_means_and_lists_every_pair(tmp_path):
    from bench.cost_dial import NAMED_SETTINGS, frontier_figure, markdown, points, row_name, row_weights, run_prefix

    # Two fixed seeds 3 points and 30% of cost apart (each misses the bar against the other); the dial's two
    # seeds sit at their mean. Only the means can meet the bar; the pairs say how the single runs compare.
    fixed = {0: (0.50, 0.010), 1: (0.53, 0.013)}
    dial = {0: (0.51, 0.011), 1: (0.52, 0.012)}
    methods = {}
    for setting in NAMED_SETTINGS.values():
        for kind, by_seed in (("dial", dial), ("fixed", fixed)):
            for seed, (accuracy, usd) in by_seed.items():
                methods[row_name(kind, setting, seed)] = {"average": {
                    "accuracy": accuracy, "usd": usd, "worker_tokens": 100.0, "worker_calls": 1.0}}
    rewards = {name: 0.7 + 0.1 * ("fixed" in name) for name in methods}
    result = {"weight_range": [0.0, 20.0], **points({"methods": methods}, (0.0, 20.0), [0, 1], rewards)}
    assert row_name("dial", 5, 0) == "conductor_dial_q5" and row_name("dial", 5, 1) == "conductor_dial_s1_q5"
    # the runs made by hand before --seeds are the bench's own
    assert run_prefix(0) + "train-cost-dial" == "train-cost-dial"
    assert run_prefix(1) + "train-cost-fixed-q5" == "seed1-train-cost-fixed-q5"
    weights = row_weights([0, 1], (0.0, 20.0))
    assert weights["conductor_fixed_s1_q0"] == 20.0 and weights["conductor_dial_q5"] == 10.0
    assert weights["conductor_dial_s1_q10"] == 0.0 and len(weights) == 12
    assert result["meets_bar"]
    balanced = result["bar"]["balanced"]
    assert balanced["accuracy_points"] == 0.0 and balanced["cost_ratio"] == 1.0
    assert balanced["fixed"]["accuracy_range"] == [0.50, 0.53]
    pairs = result["pairs"]["balanced"]
    assert len(pairs) == 4 and sum(p["meets_bar"] for p in pairs) == 2  # dial 0 vs fixed 0, dial 1 vs fixed 1
    assert len(result["points"]) == 12
    text = markdown(result, "cost-dial", "python -m bench.cost_dial --seeds 0 1")
    assert "the means over seeds 0, 1" in text and "Pairs meeting the bar: 6 of 12." in text
    assert "| balanced | 0.7000 | 0.8000 | -0.1000 |" in text  # the reward each was trained on
    assert "| balanced | 5 | 10 | 51.50 (51.00-52.00) | 51.50 (50.00-53.00) |" in text
    frontier_figure(result, tmp_path / "dial_frontier.png")
    assert (tmp_path / "dial_frontier.png").read_bytes()[:4] == b"\x89PNG"
    single = points({"methods": {k: v for k, v in methods.items() if "_s1_" not in k}}, (0.0, 20.0))
    assert single["bar"]["best"]["accuracy_points"] == 1.0 and single["seeds"] == [0]
    text = markdown({"weight_range": [0.0, 20.0], **single}, "cost-dial", "python -m bench.cost_dial")
    assert "judged on the policies themselves." in text and "Pairs meeting" not in text
    assert "| best | 10 | 0 | 51.00 | 50.00 | +1.00 | 0.01100 | 0.01000 | 1.100 | yes |" in text
    assert "objective each policy was trained on" not in text  # no rewards given


def test_the_bench_reads_each_rows_heldout_reward_at_its_own_weight(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from bench.cost_dial import heldout_rewards
    from conductor.evaluation.outcome import RECURSIVE_TURN, Outcome
    from conductor.rewards import RewardConfig

    def outcome(method, domain, correct, usd, tokens, error=None, parse_error=None, judge_usd=0.0):
        return Outcome(method=method, task_id=f"{method}-{domain}-{usd}-{tokens}", domain=domain, repeat=0,
                       correct=None if error else correct, worker_calls=1, worker_prompt_tokens=tokens,
                       worker_completion_tokens=0, conductor_tokens=0, usd=usd, latency_s=0.0, steps=1, rounds=1,
                       workers=("w",), access=("all",), parse_error=parse_error, error=error,
                       judge_usd=judge_usd).row()

    rows = [outcome("dial", "code", True, 0.01, 100), outcome("dial", "code", False, 0.01, 100),
            outcome("dial", "math", True, 0.02, 3400),               # 1,000 tokens over the free 2,400
            outcome("dial", "math", True, 0.0, 0, error="timeout"),  # infrastructure: left out
            outcome("fixed", "code", True, 0.0, 100, parse_error="missing_list"),
            outcome("other", "code", True, 0.0, 100),
            outcome("judged", "code", True, 0.01, 100, judge_usd=0.5),  # the judge's spend is not the cost
            outcome("recursive", "code", True, 0.0, 100, parse_error=RECURSIVE_TURN + "missing_list")]
    path = tmp_path / "outcomes.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    settings = RewardConfig(wrong=0.0, format_error=0.0, penalty_free_worker_tokens=2400,
                            cost_penalty_per_1k_worker_tokens=0.5)
    got = heldout_rewards(path, settings, {"dial": 10.0, "fixed": 20.0, "judged": 10.0, "recursive": 10.0})
    code = ((1 - 0.1) + max(0 - 0.1, 0.0)) / 2       # floored at format_error
    math = 1 - 0.2 - 0.5
    assert got["dial"] == pytest.approx((code + math) / 2)
    assert got["fixed"] == 0.0 and "other" not in got  # a format error scores format_error
    assert got["judged"] == pytest.approx(0.9)
    assert got["recursive"] == 1.0  # a recursive turn that did not parse leaves the root's right answer standing
