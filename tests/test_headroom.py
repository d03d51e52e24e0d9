"""The two-call headroom formula against the simulator itself: the expected accuracy it computes is what the
oracle's own answers to a solve-then-check conversation come to."""

import pytest

from conductor.config import SimulatorConfig
from conductor.simulator.headroom import headroom, main, solve_then_check
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset

# 600 items a domain: ~430 answers are a draw, so the realised mean sits within ~0.015 (one s.e.) of the formula
TOY = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=600)


@pytest.fixture(scope="module")
def toy():
    preset = load_preset(TOY)
    return preset, Oracle(preset, TOY)


def _solve_then_check(oracle, solver, checker, task):
    """The conversation an executor sends: the question and a solve subtask, then a check that sees it."""
    first = [{"role": "user", "content": f"Question:\n{task.prompt}\n\nSolve the question."}]
    answer = oracle.answer(solver, first)
    second = first + [{"role": "assistant", "content": answer.text},
                      {"role": "user", "content": "Check the answer above and correct it if it is wrong."}]
    return answer.correct, oracle.answer(checker, second).correct


def test_formula_matches_the_oracles_answers(toy):
    preset, oracle = toy
    tasks = [t for t in preset.tasks if t.domain == "arithmetic"]
    solver, checker = "toy-reverse", "toy-arith"  # a weak solver checked by the specialist: both branches
    outcomes = [_solve_then_check(oracle, solver, checker, t) for t in tasks]
    for task, (first_right, final_right) in zip(tasks, outcomes):
        a, b = oracle.base_correct[(solver, task.id)], oracle.base_correct[(checker, task.id)]
        assert first_right == a
        if a and b:
            assert final_right
        if not a and not b:
            assert not final_right
    realised = sum(final for _, final in outcomes) / len(tasks)
    assert realised == pytest.approx(solve_then_check(oracle, TOY, solver, checker, tasks), abs=0.05)


def test_checking_your_own_answer_gains_nothing(toy):
    preset, oracle = toy
    rows = headroom(oracle, TOY, [w.name for w in preset.workers], preset.tasks)
    for row in rows:
        single = dict(row.singles)
        own = {(a, b): p for a, b, p in row.pairs if a == b}
        for worker, accuracy in single.items():
            assert own[(worker, worker)] == pytest.approx(accuracy)
        assert row.singles[0][1] == max(single.values())
        assert row.pairs[0][2] >= row.singles[0][1]  # a specialist checked by itself is a pair too


def test_cli_prints_one_row_per_domain(capsys):
    assert main(["--config", "configs/train-toy.yaml", "--set", "evaluate.split=all"]) == 0
    out = capsys.readouterr().out
    for domain in ("arithmetic", "reverse", "sort"):
        assert f"| {domain} |" in out


def test_cli_rejects_a_split_larger_than_the_items(capsys):
    code = main(["--config", "configs/train-toy.yaml", "--set", "simulator.toy_items_per_domain=10",
                 "--set", "evaluate.split=heldout", "--set", "train.heldout_questions=400"])
    assert code == 2
    assert "cannot give" in capsys.readouterr().err


def test_cli_refuses_a_real_pool(capsys):
    assert main(["--config", "configs/train-toy.yaml", "--set", "data.datasets=[{format: gsm8k, path: x.jsonl}]"]) == 2
    assert "simulated preset" in capsys.readouterr().err


def test_cli_prints_the_unseen_types_of_paper7_and_refuses_them_on_the_toy(capsys, shared_data):
    assert main(["--config", "configs/train-paper7.yaml", "--set", f"simulator.data_dir={shared_data}",
                 "--set", "evaluate.split=unseen"]) == 0
    out = capsys.readouterr().out
    assert "split unseen (1236 items)" in out
    for domain in ("aime", "mbpp", "physchem"):
        assert f"| {domain} |" in out
    assert "| math500 |" not in out
    assert main(["--config", "configs/train-toy.yaml", "--set", "evaluate.split=unseen"]) == 2
    assert "no unseen task types" in capsys.readouterr().err
