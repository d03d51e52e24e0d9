"""The worked examples (examples/) load as written from the repository root: each config is valid, preflight
finds nothing missing (its simulated pool knows every question of the run), and each reward scores what the
simulated workers say. Training them is what tests/test_reward_plugins_training.py does with the same kinds."""

from pathlib import Path

import pytest

from cluster.preflight import preflight
from cluster.rollouts import tasks_for
from conductor.config_loader import load_config
from conductor.simulator.presets import load_preset
from conductor.simulator.render import own_value, render_answer
from conductor.verifiers.verify import verify

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(REPO.glob("examples/*/train.yaml"))


def test_there_are_the_two_examples_the_readme_names():
    assert [path.parent.name for path in EXAMPLES] == ["custom-task", "judged-task"]


@pytest.mark.parametrize("config_path", EXAMPLES, ids=lambda path: path.parent.name)
def test_an_example_loads_and_passes_preflight_from_the_repository_root(config_path, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    config = load_config(str(config_path.relative_to(REPO)), [f"output.dir={tmp_path}"])
    assert preflight(config) == []
    tasks = tasks_for(config)
    preset = load_preset(config.simulator)
    assert {t.prompt for t in tasks} <= {t.prompt for t in preset.tasks}
    assert len({t.domain for t in tasks}) == 3 and len(preset.workers) == 3


def test_the_custom_reward_gives_full_partial_and_no_credit(monkeypatch):
    monkeypatch.chdir(REPO)
    config = load_config("examples/custom-task/train.yaml")
    preset = load_preset(config.simulator)
    worker = preset.workers[0]
    scores = {}
    for task in tasks_for(config):
        right = render_answer(task, own_value(task, True, 0.5), worker, "solve", 0.5)
        assert verify(task, right, config.verifier).score == 1.0
        for draw in (0.1, 0.5, 0.9):  # the simulator's near misses: +1, -1, +10
            wrong = verify(task, render_answer(task, own_value(task, False, draw), worker, "solve", draw),
                           config.verifier)
            assert not wrong.correct
            scores[wrong.score] = scores.get(wrong.score, 0) + 1
    assert set(scores) == {0.0, 0.3}  # partial credit within 1% of a large reference, none for a small one
