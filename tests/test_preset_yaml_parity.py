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
