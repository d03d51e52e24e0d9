"""The shipped ``toy`` and ``paper-7`` presets give exactly the SimPresets the old Python constants gave:
the same workers in the same order with bit-identical floats, the same error correlation, tasks and unseen
tasks, pinned as one digest per config (taken from the code before the presets moved to YAML)."""

import hashlib
import json
import os
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
    "eval-paper7": (lambda data: load_config(REPO / "configs/eval-paper7.yaml",
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


SETTINGS_PRESET = """
name: sized
workers:
  - {name: solo, description: one model, accuracy: {gsm8k: 0.5, math500: 0.5}}
tasks:
  datasets:
    - {format: gsm8k, path: "{data_dir}/gsm8k.jsonl", limit: "{mmlu_items}"}
unseen:
  datasets:
    - {format: math500, path: "{data_dir}/math500.jsonl", limit: 12}
"""


def test_a_presets_entries_take_the_runs_data_dir_and_settings(shared_data, tmp_path):
    """Relative data_dir as the shipped configs give it; "{mmlu_items}" alone becomes the number."""
    path = tmp_path / "sized.yaml"
    path.write_text(SETTINGS_PRESET)
    relative = os.path.relpath(shared_data)
    config = load_config(None, [f"simulator.preset={path}", f"simulator.data_dir={relative}",
                                "simulator.mmlu_items=25"]).simulator
    preset = load_preset(config)
    assert len(preset.tasks) == 25 and preset.tasks[0].id == "gsm8k/0" and len(preset.unseen) == 12


@pytest.mark.parametrize(("change", "message"), [
    (("{data_dir}/gsm8k", "{datadir}/gsm8k"), r"tasks\.datasets\.0\.path: \{datadir\} is not a simulator setting "
                                            r"\(known: aggregate_follow, .*data_dir, .*mmlu_items"),
    (("limit: 12", "limit: '{host}'"), r"unseen\.datasets\.0: limit: Input should be a valid integer"),
    (("limit: 12", "include: {level: []}"), r"unseen\.datasets\.0: include\.level: List should have at least 1"),
    (("format: math500", "format: math5000"), r"unseen\.datasets\.0: format: Input should be 'math500'"),
])
def test_a_wrong_entry_in_a_preset_fails_at_config_load_naming_it(tmp_path, change, message):
    path = tmp_path / "sized.yaml"
    path.write_text(SETTINGS_PRESET.replace(*change))
    with pytest.raises(ValueError, match=rf"simulator\.preset {path}: {message}"):
        load_config(None, [f"simulator.preset={path}"])


def test_a_missing_data_file_names_the_entry_the_path_and_the_setting(tmp_path):
    config = load_config(None, ["simulator.preset=paper-7", f"simulator.data_dir={tmp_path}/nowhere"]).simulator
    with pytest.raises(FileNotFoundError) as caught:
        load_preset(config)
    assert str(caught.value) == (f"simulator.preset paper-7: tasks.datasets.0.path {tmp_path}/nowhere/math500.jsonl "
                                 f"({{data_dir}}/math500.jsonl with simulator.data_dir={tmp_path}/nowhere): not found")
