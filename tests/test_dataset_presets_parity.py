"""The built-in dataset formats produce exactly the task lists they produced before they became field-map
presets: ids, prompts, answers, verifiers, meta and order, pinned as a digest per format (real files from
../shared/data; GPQA and LiveCodeBench, which it lacks, from small files written here)."""

import base64
import csv
import hashlib
import json
import pickle
import zlib

import pytest

from conductor.config import DatasetSpec, SimulatorConfig
from conductor.simulator.presets import load_preset
from conductor.tasks import load_tasks


def digest(tasks) -> str:
    rows = [[t.id, t.domain, t.prompt, t.answer, t.verifier, t.meta] for t in tasks]
    return hashlib.sha256(json.dumps(rows, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:24]


def write_gpqa(path) -> None:
    columns = ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2",
               "Incorrect Answer 3", "Subdomain"]
    rows = [["r1", " Which is a noble gas? ", "Argon ", "Nitrogen", " Oxygen", "Hydrogen", "Chemistry"],
            ["", "What is 2 + 2?", "4", "3", "5", "22", "Arithmetic"],
            ["r3", "Which particle has no charge?", "Neutron", "Proton", "Electron", "Positron", ""]]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        writer.writerows(rows)


def write_lcb(path) -> None:
    private = base64.b64encode(zlib.compress(pickle.dumps(json.dumps(
        [{"input": "3\n", "output": "6\n", "testtype": "stdin"}])))).decode()
    rows = [{"question_id": "abc1", "question_content": "Double n.", "starter_code": "", "difficulty": "easy",
             "public_test_cases": json.dumps([{"input": "2\n", "output": "4\n", "testtype": "stdin"}]),
             "private_test_cases": private, "metadata": "{}"},
            {"question_content": "Add two numbers.", "difficulty": "medium",
             "starter_code": "class Solution:\n    def add(self, a: int, b: int) -> int:\n        ",
             "public_test_cases": [{"input": "1\n2", "output": "3", "testtype": "functional"}],
             "metadata": {"func_name": "add"}},
            {"question_id": "q3", "question": "Print hello.", "public_test_cases": "[]"}]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))


# format -> (file under ../shared/data, extra spec fields, pinned digest)
SHARED = {
    "math500": ("math500.jsonl", {}, "f3d3665877cefa8ae1029d5d"),
    "aime": ("aime24.jsonl", {}, "53c0f69805da9efc525e23a8"),
    "gsm8k": ("gsm8k.jsonl", {}, "7ba73c32c40ef1935c466c5e"),
    "gsm8k-shuffled": ("gsm8k.jsonl", {"shuffle_seed": 3, "limit": 50}, "7f629b31c6f9645cc6bcaf80"),
    "mmlu": ("mmlu_stem.jsonl", {}, "c5083143ef88f7f42c5f44f9"),
    "mmlu-seed11": ("mmlu_stem.jsonl", {"shuffle_seed": 11}, "374dac98900c699c34f98fc8"),
    "humaneval": ("humaneval.jsonl.gz", {}, "cae9e4b1a2dc8fb12fd5354d"),
    "mbpp": ("mbpp_sanitized.json", {}, "f03c4221c0f9796edf365aca"),
}
WRITTEN = {"gpqa": ("gpqa.csv", write_gpqa, "37a23e60c472712bc5665d06"),
           "livecodebench": ("lcb.jsonl", write_lcb, "6aec13f3404f898de49f521f")}


@pytest.mark.parametrize("name", sorted(SHARED))
def test_shared_file_tasks_are_unchanged(shared_data, name):
    filename, extra, pinned = SHARED[name]
    spec = DatasetSpec(format=name.split("-")[0], path=str(shared_data / filename), **extra)
    assert digest(load_tasks(spec)) == pinned


@pytest.mark.parametrize("fmt", sorted(WRITTEN))
def test_written_file_tasks_are_unchanged(tmp_path, fmt):
    filename, write, pinned = WRITTEN[fmt]
    write(tmp_path / filename)
    assert digest(load_tasks(DatasetSpec(format=fmt, path=str(tmp_path / filename)))) == pinned


def test_simulator_task_sets_are_unchanged(shared_data):
    """The paper-7 preset's tasks and its unseen types (AIME, MMLU physics/chemistry as 'physchem', MBPP), now
    data entries of its YAML (filters, {data_dir}, "{mmlu_items}"): the digests the Python that built them gave."""
    preset = load_preset(SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=600))
    assert digest(preset.tasks) == "985468fe7940771c713f8ea5"
    assert digest(preset.unseen) == "5626d24a007b1d738c26502e"
