import csv
import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

from conductor.config import DatasetSpec
from conductor.tasks import load_tasks, read_rows
from conductor.tasks.formats import RowFormatError, preset_tasks
from conductor.verifiers.verify import verify

EXPECTED = {"math500": ("math500.jsonl", 500, "math"), "gsm8k": ("gsm8k.jsonl", 1319, "number"),
            "aime": ("aime24.jsonl", 30, "math"), "mmlu": ("mmlu_stem.jsonl", 3018, "choice"),
            "humaneval": ("humaneval.jsonl.gz", 164, "humaneval"), "mbpp": ("mbpp_sanitized.json", 427, "mbpp")}


@pytest.mark.parametrize("fmt", sorted(EXPECTED))
def test_shared_datasets_load_as_tasks(shared_data, fmt):
    filename, count, verifier = EXPECTED[fmt]
    tasks = load_tasks(DatasetSpec(format=fmt, path=str(shared_data / filename)))
    assert len(tasks) == count and all(t.verifier == verifier for t in tasks)
    assert len({t.id for t in tasks}) == count
    assert all(t.prompt and t.domain for t in tasks)


def test_aime_gold_verifies(shared_data):
    tasks = load_tasks(DatasetSpec(format="aime", path=str(shared_data / "aime24.jsonl")))
    assert all(verify(t, f"\\boxed{{{t.answer}}}").correct for t in tasks)
    assert "\\boxed{}" in tasks[0].prompt


def test_limit_and_seeded_shuffle(shared_data):
    spec = DatasetSpec(format="gsm8k", path=str(shared_data / "gsm8k.jsonl"), limit=5, shuffle_seed=3)
    first, again = load_tasks(spec), load_tasks(spec)
    assert [t.id for t in first] == [t.id for t in again] and len(first) == 5
    assert [t.id for t in first] != [f"gsm8k/{i}" for i in range(5)]


def test_gpqa_csv_layout(tmp_path):
    path = tmp_path / "gpqa.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, ["Record ID", "Question", "Correct Answer", "Incorrect Answer 1",
                                         "Incorrect Answer 2", "Incorrect Answer 3", "Subdomain"])
        writer.writeheader()
        writer.writerow({"Record ID": "r1", "Question": "Which is a noble gas?", "Correct Answer": "Argon",
                         "Incorrect Answer 1": "Nitrogen", "Incorrect Answer 2": "Oxygen",
                         "Incorrect Answer 3": "Hydrogen", "Subdomain": "Chemistry"})
    task = load_tasks(DatasetSpec(format="gpqa", path=str(path)))[0]
    assert task.id == "gpqa/r1" and f"({task.answer}) Argon" in task.prompt
    assert verify(task, f"Answer: {task.answer}").correct


def test_parquet_and_gzip_and_bad_lines(tmp_path, shared_data):
    rows = read_rows(str(shared_data / "gsm8k.jsonl"))[:3]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "g.parquet")
    assert read_rows(str(tmp_path / "g.parquet")) == rows
    (tmp_path / "g.jsonl.gz").write_bytes(gzip.compress("\n".join(map(json.dumps, rows)).encode()))
    assert read_rows(str(tmp_path / "g.jsonl.gz")) == rows
    (tmp_path / "bad.jsonl").write_text('{"ok": 1}\n{not json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        read_rows(str(tmp_path / "bad.jsonl"))


def test_missing_field_is_a_clear_error():
    with pytest.raises(RowFormatError, match=r"row 1: field 'Question': missing \(the row has \[.question.\]\)"):
        preset_tasks([{"question": "lowercase layout"}], "gpqa")
    with pytest.raises(RowFormatError, match=r"row 1: field 'Correct Answer': missing"):
        preset_tasks([{"Question": "Which gas?"}], "gpqa")


def test_s3_path_through_a_real_s3_server(s3_server, shared_data):
    fs = s3fs.S3FileSystem(**s3_server.storage_options)
    fs.mkdir("datasets")
    fs.put(str(shared_data / "math500.jsonl"), "datasets/math500.jsonl")
    spec = DatasetSpec(format="math500", path="s3://datasets/math500.jsonl", limit=20)
    remote = load_tasks(spec, storage_options=s3_server.storage_options)
    local = load_tasks(DatasetSpec(format="math500", path=str(shared_data / "math500.jsonl"), limit=20))
    assert remote == local and len(remote) == 20
    with pytest.raises(PermissionError):
        load_tasks(spec, storage_options={**s3_server.storage_options, "secret": "wrong"})
