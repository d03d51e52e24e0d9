"""Every workflow of up to five steps, scored from the simulator's rules: the enumeration misses no arrangement
and counts none twice, the vectorised rules agree with the oracle's own decision on every item, the pair
family is what it was, and small cases come out as the rules say by hand."""

import itertools
import random

import numpy as np
import pytest

from conductor.config import SimulatorConfig
from conductor.simulator.headroom import main, parse_written, solve_then_check
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset
from conductor.simulator.workflow_scores import (
    assignments,
    expected,
    item_types,
    oracle_expectation,
    per_item,
    search,
    type_counts,
)
from conductor.simulator.workflow_space import (
    Node,
    _relabelled,
    arrangements,
    canonical,
    partitions,
    shapes,
    success,
    type_table,
)
from conductor.simulator.workflow_tokens import simulate, token_model

TOY = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=200)
C = SimulatorConfig()
S, P = Node("solve"), Node("plan")


@pytest.fixture(scope="module")
def toy():
    preset = load_preset(TOY)
    return preset, Oracle(preset, TOY), [w.name for w in preset.workers]


@pytest.fixture(scope="module")
def paper7(shared_data):
    config = SimulatorConfig(preset="paper-7", port=0, latency_scale=0, data_dir=str(shared_data))
    preset = load_preset(config)
    return preset, Oracle(preset, config), [w.name for w in preset.workers]


def _type(can, blocks):
    """The type index of steps with these "can" bits and wrong-answer blocks."""
    all_can, all_blocks = type_table(len(can))
    return next(t for t, (k, b) in enumerate(zip(all_can.tolist(), all_blocks.tolist()))
                if k == list(can) and b == list(blocks))


def test_the_shapes_are_every_arrangement_once():
    assert [len(shapes(n)) for n in range(1, 6)] == [1, 3, 12, 121, 2709]
    assert [len(partitions(n)) for n in range(1, 6)] == [1, 2, 5, 15, 52]  # Bell numbers
    for n in range(1, 5):
        assert {canonical(shape) for shape in arrangements(n)} == set(shapes(n))
    assert len(set(shapes(5))) == 2709
    assert shapes(2) == ((S, Node("check", (0,))), (S, Node("see_solve", (0,))), (P, Node("plan_solve", (0,))))


def test_a_relabelled_workflow_scores_the_same(toy):
    preset, oracle, workers = toy
    items = item_types(oracle, workers, [t for t in preset.tasks if t.domain == "reverse"])
    rng = random.Random(0)
    for shape in [s for s in arrangements(4) if not any(n.role == "plan" for n in s)][:60]:
        who = [rng.choice(workers) for _ in shape]
        target = canonical(shape)
        for order in itertools.permutations(range(len(shape) - 1)):
            new_index = list(order) + [len(shape) - 1]
            if _relabelled(shape, new_index) == target:
                moved = [None] * len(shape)
                for old, new in enumerate(new_index):
                    moved[new] = who[old]
                assert expected(items, C, target, moved) == pytest.approx(expected(items, C, shape, who), abs=1e-9)
                break
        else:
            raise AssertionError(f"no step order of {shape} is {target}")


def test_small_cases_by_hand():
    check = (S, Node("check", (0,)))
    assert success(check, C)[[_type((0, 0), (0, 1)), _type((1, 0), (0, 1)), _type((0, 1), (0, 1)),
                              _type((1, 1), (0, 1))]].tolist() == pytest.approx([0, C.verify_keep, C.verify_fix, 1])
    see = (S, Node("see_solve", (0,)))
    assert success(see, C)[_type((1, 0), (0, 1))] == pytest.approx(C.boost)
    assert success(see, C)[_type((0, 1), (0, 1))] == pytest.approx(1 - C.mislead)
    plan = (P, Node("plan_solve", (0,)))
    assert success(plan, C)[_type((1, 0), (0, 1))] == pytest.approx(C.plan_follow)
    assert success(plan, C)[_type((0, 1), (0, 1))] == pytest.approx(1 - C.plan_mislead)
    two = (S, S, Node("reconcile", (0, 1)))
    # one right and one wrong answer: a tie, which goes to the latest; a reconciler that cannot solve follows it
    assert success(two, C)[_type((1, 0, 0), (0, 1, 2))] == pytest.approx(0.0)
    assert success(two, C)[_type((0, 1, 0), (0, 1, 2))] == pytest.approx(C.aggregate_follow)
    assert success(two, C)[_type((1, 0, 1), (0, 1, 2))] == pytest.approx(C.aggregate_pick)  # it can: picks
    three = (S, S, S, Node("reconcile", (0, 1, 2)))
    # two equal wrong answers outvote a right one; two different ones do not
    assert success(three, C)[_type((0, 0, 1, 0), (0, 0, 1, 2))] == pytest.approx(0.0)
    assert success(three, C)[_type((0, 0, 1, 0), (0, 1, 2, 3))] == pytest.approx(C.aggregate_follow)
    kept = (S, Node("check", (0,)), S, Node("reconcile", (0, 1, 2)))
    # a checker that cannot solve lets the wrong answer stand, so it is counted twice against one right one
    assert success(kept, C)[_type((0, 0, 1, 0), (0, 1, 2, 3))] == pytest.approx(0.0)
    own = (S, Node("check", (0,)))
    for bit in (0, 1):  # checking your own answer changes nothing
        assert success(own, C)[_type((bit, bit), (0, 0))] == bit


def test_the_pair_family_is_unchanged(toy):
    preset, oracle, workers = toy
    for domain in ("arithmetic", "sort"):
        tasks = [t for t in preset.tasks if t.domain == domain]
        items = item_types(oracle, workers, tasks)
        for a, b in itertools.product(workers, workers):
            pair = (S, Node("check", (0,)))
            assert expected(items, TOY, pair, (a, b)) == pytest.approx(solve_then_check(oracle, TOY, a, b, tasks))


def test_counts_cover_every_item_and_match_per_item(toy):
    preset, oracle, workers = toy
    items = item_types(oracle, workers, [t for t in preset.tasks if t.domain == "sort"])
    for n in (1, 3, 4):
        counts = type_counts(items, n)
        assert counts.shape == (len(workers) ** n, 2 ** n * len(partitions(n)))
        assert (counts.sum(axis=1) == items.items).all()
    rng = random.Random(1)
    for shape in rng.sample(shapes(4), 10):
        who = [rng.choice(workers) for _ in shape]
        assert expected(items, TOY, shape, who) == pytest.approx(per_item(items, TOY, shape, who).mean(), abs=1e-6)


def _agrees_with_the_oracle(oracle, workers, tasks, workflows):
    items = item_types(oracle, workers, tasks)
    for shape, who in workflows:
        rules = per_item(items, oracle.config, shape, who)
        by_oracle = [oracle_expectation(oracle, shape, who, task) for task in tasks]
        np.testing.assert_allclose(rules, by_oracle, atol=1e-9, err_msg=f"{shape} {who}")


def test_the_rules_agree_with_the_oracle_on_every_item_toy(toy):
    preset, oracle, workers = toy
    rng = random.Random(2)
    workflows = [(shape, [rng.choice(workers) for _ in shape]) for n in (1, 2, 3) for shape in shapes(n)]
    workflows += [(shape, [rng.choice(workers) for _ in shape]) for shape in rng.sample(shapes(4), 6)]
    for domain in ("arithmetic", "reverse"):
        _agrees_with_the_oracle(oracle, workers, [t for t in preset.tasks if t.domain == domain][:60], workflows)
    # every four-step shape that reconciles, where which wrong answers coincide decides the answer
    reconciling = [(shape, [rng.choice(workers) for _ in shape]) for shape in shapes(4)
                   if any(node.role == "reconcile" for node in shape)]
    _agrees_with_the_oracle(oracle, workers, [t for t in preset.tasks if t.domain == "sort"][:30], reconciling)


def test_the_rules_agree_with_the_oracle_on_every_item_paper7(paper7):
    preset, oracle, workers = paper7
    rng = random.Random(3)
    five = [s for s in shapes(5) if any(n.role == "reconcile" for n in s) and any(n.role == "plan" for n in s)]
    few = [(shape, [rng.choice(workers) for _ in shape]) for shape in shapes(3)]
    many = [(shape, [rng.choice(workers) for _ in shape]) for shape in rng.sample(five, 2)]
    many += [((S, S, S, S, Node("reconcile", (0, 1, 2, 3))), ["gemma-3-27b", "qwen3-32b-direct", "gpt-5",
                                                                "gemma-3-27b", "qwen3-32b-direct"])]
    tasks = {domain: [t for t in preset.tasks if t.domain == domain] for domain in ("mmlu", "math500", "code")}
    _agrees_with_the_oracle(oracle, workers, tasks["mmlu"][:40], few)  # wrong answers often coincide on MMLU
    for rows in tasks.values():
        _agrees_with_the_oracle(oracle, workers, rows[:25], many)


def test_search_finds_the_best_single_and_pair_and_keeps_a_budget(toy):
    preset, oracle, workers = toy
    tasks = [t for t in preset.tasks if t.domain == "reverse"]
    items = item_types(oracle, workers, tasks)
    best1, near1 = search(items, TOY, 1, 0.0)
    assert best1.accuracy == pytest.approx(items.can.mean(axis=0).max(), abs=1e-6) and near1[1] >= 1
    best2, _ = search(items, TOY, 2, 0.0)
    pairs = max(solve_then_check(oracle, TOY, a, b, tasks) for a, b in itertools.product(workers, workers))
    assert best2.accuracy >= pairs - 1e-6 and best2.accuracy >= best1.accuracy
    best4, near4 = search(items, TOY, 4, 0.02)
    assert best4.accuracy >= best2.accuracy and sum(near4.values()) >= 1
    every = np.concatenate([type_counts(items, 4) @ success(s, TOY) for s in shapes(4)]) / items.items
    assert best4.accuracy == pytest.approx(max(every.max(), best2.accuracy), abs=1e-5)
    model = token_model(oracle, workers, tasks)
    cheap, _ = search(items, TOY, 4, 0.0, model.cost, budget=400)
    plan = np.array([[workers.index(w) for w in cheap.workers]])
    assert model.cost(cheap.shape, plan)[0] <= 400
    with pytest.raises(ValueError, match="no workflow"):
        search(items, TOY, 2, 0.0, model.cost, budget=1)
    assert len(assignments(3, 4)) == 81


def test_one_run_is_a_draw_of_the_rules_and_bills_what_the_model_estimates(paper7):
    preset, oracle, workers = paper7
    tasks = [t for t in preset.tasks if t.domain == "mmlu"][:80]
    items = item_types(oracle, workers, tasks)
    model = token_model(oracle, workers, tasks)
    chain = (S, Node("check", (0,)), Node("check", (1,)), Node("check", (1,)), Node("reconcile", (1, 2, 3)))
    for shape, who in [(chain, ("gpt-5", "claude-sonnet-4", "claude-sonnet-4", "claude-sonnet-4", "gemini-2.5-pro")),
                       ((P, Node("plan_solve", (0,)), Node("see_solve", (1,))), ("gemma-3-27b", "r1-distill-32b",
                                                                                 "qwen3-32b-direct"))]:
        right, billed = simulate(oracle, shape, who, tasks)
        chance = per_item(items, oracle.config, shape, who)
        assert right[chance == 1].all() and not right[chance == 0].any()
        estimate = model.cost(shape, np.array([[workers.index(w) for w in who]]))[0]
        assert estimate == pytest.approx(billed.mean(), rel=0.02)


def test_item_types_refuse_a_wrong_answer_that_is_right(toy, monkeypatch):
    preset, oracle, workers = toy
    monkeypatch.setattr("conductor.simulator.workflow_scores.is_right", lambda task, value: True)
    with pytest.raises(ValueError, match="is right"):
        item_types(oracle, workers, preset.tasks[:1])


def test_parse_written():
    workers = ["a-1", "b-2"]
    assert parse_written("a-1([])", workers) == ((S,), ("a-1",))
    assert parse_written("a-1([]) → b-2(all)", workers) == ((S, Node("check", (0,))), ("a-1", "b-2"))
    for text in ("c-3([])", "a-1(all)", "a-1([]) → b-2([]) → a-1(all)", "a-1([]) → b-2([])"):
        with pytest.raises(ValueError, match="not a menu workflow"):
            parse_written(text, workers)


def test_cli_prints_the_winners_of_every_domain(capsys):
    assert main(["--config", "configs/train-toy.yaml", "--set", "evaluate.split=heldout", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "The most accurate workflow of up to 2 steps" in out
    for domain in ("arithmetic", "reverse", "sort"):
        assert f"| {domain} | train |" in out and f"| {domain} | heldout |" in out
    assert main(["--config", "configs/train-toy.yaml", "--steps", "6"]) == 2
