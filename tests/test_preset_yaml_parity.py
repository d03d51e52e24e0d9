"""The shipped ``toy`` and ``paper-7`` presets give exactly the SimPresets the old Python constants gave:
the same workers in the same order with bit-identical floats, the same error correlation, tasks and unseen
tasks, pinned as one digest per config (taken from the code before the presets moved to YAML)."""

import hashlib
import json
from pathlib import Path

import pytest

from conductor.config import SimulatorConfig
from conductor.config_loader import load_config
from conductor.simulator.presets import load_preset

REPO = Path(__file__).resolve().parents[1]


def _exact(value):
    """Numbers as float hex, so a last-bit change shows (an int latency read as a float, 900 -> 900.0, is the
    same number and gives the same arithmetic); everything else as JSON has it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value).hex()
    if isinstance(value, dict):
        return {k: _exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    return value


def _tasks(tasks) -> list:
    return [[t.id, t.domain, t.prompt, t.answer, t.verifier, t.meta] for t in tasks]


def preset_digest(preset) -> str:
    workers = [[w.name, w.description, list(w.accuracy.items()), w.latency_ms, w.latency_sigma, w.price_in_per_m,
                w.price_out_per_m, w.answer_tokens, w.reasoning_tokens] for w in preset.workers]
    body = [preset.name, _exact(workers), _exact(list(preset.error_correlation.items())), _tasks(preset.tasks),
            _tasks(preset.unseen)]
    return hashlib.sha256(json.dumps(body, ensure_ascii=False).encode()).hexdigest()[:24]


CASES = {  # name: (config from ../shared/data's path, pinned digest)
    "default": (lambda data: SimulatorConfig(), "071267dc565168e48b4b75ff"),
    "train-toy": (lambda data: load_config(REPO / "configs/train-toy.yaml").simulator, "338ca99e09b23f5cbb4de8b4"),
    "paper-7-default": (lambda data: SimulatorConfig(preset="paper-7", data_dir=data), "2ce203288c996879d42f0b55"),
    "train-paper7": (lambda data: load_config(REPO / "configs/train-paper7.yaml",
                                              [f"simulator.data_dir={data}"]).simulator, "2ce203288c996879d42f0b55"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_preset_matches_the_old_constants(shared_data, case):
    make, pinned = CASES[case]
    assert preset_digest(load_preset(make(str(shared_data)))) == pinned


USER_PRESET = """
name: mine
workers:
  - name: fast
    description: a fast cheap model
    accuracy: {gsm8k: 0.6, aime: 0.05}
    latency_ms: 120
    price_in_per_m: 0.1
    price_out_per_m: 0.4
  - name: slow
    description: a slow careful model
    accuracy_percent: {gsm8k: 92.5, aime: 40}
    latency_ms: 2000
    reasoning_tokens: 800
error_correlation: {gsm8k: 0.6}
tasks:
  datasets:
    - {format: gsm8k, path: DATA/gsm8k.jsonl, limit: 20}
unseen:
  datasets:
    - {format: aime, path: DATA/aime24.jsonl, limit: 5}
"""


def test_a_user_preset_file_loads_by_path(shared_data, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(USER_PRESET.replace("DATA", str(shared_data)))
    config = load_config(None, [f"simulator.preset={path}"]).simulator
    preset = load_preset(config)
    assert preset.name == "mine" and [w.name for w in preset.workers] == ["fast", "slow"]
    assert preset.workers[1].accuracy == {"gsm8k": 0.925, "aime": 0.4} and preset.workers[1].reasoning_tokens == 800
    assert preset.error_correlation == {"gsm8k": 0.6}
    assert len(preset.tasks) == 20 and {t.domain for t in preset.tasks} == {"gsm8k"}
    assert len(preset.unseen) == 5 and {t.domain for t in preset.unseen} == {"aime"}


@pytest.mark.parametrize(("value", "message"), [
    ("toy2", "unknown preset 'toy2'"), ("no/such/file.yaml", "not found"),
    ("BAD", "workers.1: Value error, worker slow: accuracy for gsm8k is 92.5, outside 0-1")])
def test_a_wrong_preset_fails_at_config_load_naming_the_key(tmp_path, value, message):
    if value == "BAD":
        value = str(tmp_path / "bad.yaml")
        (tmp_path / "bad.yaml").write_text(USER_PRESET.replace("accuracy_percent", "accuracy"))
    with pytest.raises(ValueError, match=r"simulator\.preset") as caught:
        load_config(None, [f"simulator.preset={value}"])
    assert message in str(caught.value)


def test_a_task_domain_without_accuracy_fails(shared_data, tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text(USER_PRESET.replace("DATA", str(shared_data)).replace("aime: 0.05", "aimee: 0.05"))
    with pytest.raises(ValueError, match="no accuracy for domain 'aime' in worker\\(s\\) fast"):
        load_preset(SimulatorConfig(preset=str(path)))
