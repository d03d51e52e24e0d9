"""The paper-7 preset's unseen task types (issue 36, scope 3): the seen tasks, and every worker's calibrated
answer on them, stay exactly what the committed paper-7 results were made with."""

import hashlib
import json

import pytest

from conductor.config import SimulatorConfig
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset

# Pinned at c369f48, before the unseen types were added to conductor/simulator/presets.py: the 1,264 seen
# tasks (id, domain, prompt, answer, verifier) and each worker's solved-or-not on each of them.
SEEN_TASKS_SHA256 = "2659f65a41c9075697ac1d5da531e707e48f87c0b564c8d2fdc2bd5647492b64"
SEEN_SOLVED_SHA256 = "e49ef69a87b6cbaaab4aed61849d07d98d3fdcfaec5da25fd6decd8d1ce8b035"


@pytest.fixture(scope="module")
def paper7(shared_data):
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=600)
    preset = load_preset(config)
    return preset, Oracle(preset, config)


def test_the_seen_tasks_and_their_calibration_are_unchanged(paper7):
    preset, oracle = paper7
    tasks = hashlib.sha256()
    for t in preset.tasks:
        tasks.update(json.dumps([t.id, t.domain, t.prompt, t.answer, t.verifier], ensure_ascii=False).encode()
                     + b"\n")
    assert len(preset.tasks) == 1264 and tasks.hexdigest() == SEEN_TASKS_SHA256
    solved = hashlib.sha256()
    for w in preset.workers:
        for t in preset.tasks:
            solved.update(f"{w.name}|{t.id}|{int(oracle.base_correct[(w.name, t.id)])}\n".encode())
    assert solved.hexdigest() == SEEN_SOLVED_SHA256
