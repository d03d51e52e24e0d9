"""Datasets by field map: any JSONL, CSV or Parquet file read through a map written in the config, and the
errors a bad map (at config load) or a bad row (at dataset load: file, row, field) gives."""

import csv
import json
from typing import get_args

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from conductor.config import DatasetSpec
from conductor.config_loader import ConfigError, load_config
from conductor.dataset_config import PresetName
from conductor.tasks import load_tasks
from conductor.tasks.field_map import RowFormatError
from conductor.tasks.formats import PRESETS
from conductor.verifiers.verify import verify


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def write_csv(path, rows):
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return str(path)


def spec_from_yaml(tmp_path, entry: dict) -> DatasetSpec:
    """Through the real loader, as a YAML config would give it."""
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"data": {"datasets": [entry]}}))
    return load_config(path).data.datasets[0]


TICKETS = [{"ticket": 7, "title": "Login fails", "body": "After the update I cannot log in.", "label": "auth",
            "product": "web", "priority": "high"},
           {"ticket": 9, "title": "Slow page", "body": "The dashboard takes a minute.", "label": "performance",
            "product": "mobile", "priority": "low"}]


def test_jsonl_with_a_template_a_domain_column_and_meta(tmp_path):
    path = write_jsonl(tmp_path / "tickets.jsonl", TICKETS)
    spec = spec_from_yaml(tmp_path, {"path": path, "template": "{title}\n\n{body}", "verifier": "exact",
                                     "fields": {"answer": "label", "id": "ticket", "domain": "product"},
                                     "meta": ["priority", "title"]})
    tasks = load_tasks(spec)
    assert [t.id for t in tasks] == ["web/7", "mobile/9"] and [t.domain for t in tasks] == ["web", "mobile"]
    assert tasks[0].prompt == ("Login fails\n\nAfter the update I cannot log in.\n\n"
                               "End the response with 'Answer: ' followed by the answer.")  # the verifier's own
    assert tasks[0].answer == "auth" and tasks[0].verifier == "exact"
    assert tasks[1].meta == {"priority": "low", "title": "Slow page"}
    assert verify(tasks[0], "Answer: auth").correct and not verify(tasks[0], "Answer: billing").correct


def test_csv_multiple_choice_with_a_constant_domain(tmp_path):
    """CSV cells are text: the option count becomes an int and the gold letter is upper-cased for the verifier."""
    rows = [{"qid": "a1", "stem": "Which planet is largest?\n(A) Mars\n(B) Jupiter\n(C) Venus", "key": "b", "n": "3"},
            {"qid": "a2", "stem": "Which is a metal?\n(A) Iron\n(B) Neon", "key": "A", "n": "2"}]
    path = write_csv(tmp_path / "quiz.csv", rows)
    spec = spec_from_yaml(tmp_path, {"path": path, "fields": {"question": "stem", "answer": "key", "id": "qid"},
                                     "domain": "quiz", "verifier": "choice", "meta": {"num_options": "n"}})
    tasks = load_tasks(spec)
    assert [(t.id, t.domain, t.answer, t.meta) for t in tasks] == [
        ("quiz/a1", "quiz", "B", {"num_options": 3}), ("quiz/a2", "quiz", "A", {"num_options": 2})]
    assert tasks[0].prompt.endswith("where X is the letter of the correct option.")
    assert verify(tasks[0], "Answer: B").correct and not verify(tasks[0], "Answer: A").correct


def test_parquet_with_renamed_meta_alternative_columns_and_no_instruction(tmp_path):
    rows = [{"uid": 1, "problem": None, "question": "What is 6 * 7?", "gold": 42, "src": "drill"},
            {"uid": 2, "problem": "What is 2 ** 5?", "question": None, "gold": 32, "src": "drill"}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "arith.parquet")
    spec = DatasetSpec(path=str(tmp_path / "arith.parquet"), verifier="number", domain="arith", id_prefix="",
                       instruction="", fields={"question": ["problem", "question"], "answer": "gold", "id": "uid"},
                       meta={"source": "src"})
    tasks = load_tasks(spec)
    assert [(t.id, t.prompt, t.answer, t.meta) for t in tasks] == [
        ("1", "What is 6 * 7?", "42", {"source": "drill"}), ("2", "What is 2 ** 5?", "32", {"source": "drill"})]


def test_row_index_ids_default_instruction_limit_and_seeded_shuffle(tmp_path):
    path = write_jsonl(tmp_path / "sums.jsonl", [{"q": f"What is {i} + {i}?", "a": 2 * i} for i in range(20)])
    spec = DatasetSpec(path=path, fields={"question": "q", "answer": "a"}, domain="sums", verifier="number",
                       shuffle_seed=5, limit=4)
    tasks = load_tasks(spec)
    assert len(tasks) == 4 and tasks == load_tasks(spec) and all(t.id.startswith("sums/") for t in tasks)
    assert [t.id for t in tasks] != [f"sums/{i}" for i in range(4)]
    assert tasks[0].prompt.endswith("End the response with '#### N', where N is the final number.")
    assert verify(tasks[0], f"#### {tasks[0].answer}").correct


@pytest.mark.parametrize("rows, entry, message", [
    ([{"q": "one", "a": "x"}, {"question": "two", "a": "y"}], {},
     r"data\.jsonl: row 2: field 'q': missing \(the row has \['a', 'question'\]\)"),
    ([{"q": "one", "a": "x"}, {"q": "two", "a": None}], {}, r"data\.jsonl: row 2: field 'a': empty or null"),
    ([{"q": "one", "a": "x"}, {"q": "two", "a": "y"}, {"q": "  \n", "a": "z"}], {},
     r"data\.jsonl: row 3: field 'q': empty question"),
    ([{"k": 1, "q": "one", "a": "x"}, {"k": 2, "q": "two", "a": "y"}, {"k": 1, "q": "three", "a": "z"}],
     {"fields": {"question": "q", "answer": "a", "id": "k"}},
     r"data\.jsonl: row 3: field 'k': id 'd/1' repeats row 1"),
    ([{"q": "one", "a": "x", "tag": 1}, {"q": "two", "a": "y"}], {"meta": ["tag"]},
     r"data\.jsonl: row 2: field 'tag': missing"),
    ([{"title": "t", "a": "x"}], {"fields": {"answer": "a"}, "template": "{title}: {body}"},
     r"data\.jsonl: row 1: field 'body': missing"),
    ([{"q": "one", "a": "x"}, {"q": "two", "a": "y", "d": "alg"}], {"domain": None, "fields": {
        "question": "q", "answer": "a", "domain": "d"}}, r"data\.jsonl: row 1: field 'd': missing"),
    ([{"q": "one", "a": "E", "n": 4}], {"verifier": "choice", "meta": {"num_options": "n"}},
     r"data\.jsonl: row 1: field 'a': 'E' is not one of the letters ABCD"),
    ([{"q": "one", "a": "A", "n": "four"}], {"verifier": "choice", "meta": {"num_options": "n"}},
     r"data\.jsonl: row 1: field 'n': 'four' is not a number of options"),
    (["just a string"], {}, r"data\.jsonl: row 1: not an object"),
    ([{"q": "one", "a": "x"}, {"q": "two", "a": float("nan")}], {}, r"data\.jsonl: row 2: field 'a': empty or null"),
    ([{"q": "one", "a": "1/2"}], {"verifier": "number"}, r"data\.jsonl: row 1: field 'a': '1/2' is not a number"),
    ([{"q": "one", "a": "Half of 48 is 24.\n#### 24"}], {"verifier": "number"}, r"row 1: field 'a': .* not a number"),
    ([], {}, r"data\.jsonl: no rows"),
    ([{"p": "3.5", "a": "x"}], {"fields": {"answer": "a"}, "template": "Price {p:.2f}?"},
     r"data\.jsonl: row 1: field 'template': 'Price \{p:\.2f\}\?' cannot format this row's values"),
])
def test_bad_rows_fail_at_load_naming_file_row_and_field(tmp_path, rows, entry, message):
    path = write_jsonl(tmp_path / "data.jsonl", rows)
    fields = {"path": path, "fields": {"question": "q", "answer": "a"}, "domain": "d", "verifier": "text", **entry}
    with pytest.raises(RowFormatError, match=message):
        load_tasks(DatasetSpec(**{key: value for key, value in fields.items() if value is not None}))


def test_files_as_users_save_them_read_right_or_fail_naming_the_file(tmp_path):
    """A spreadsheet's byte-order mark is read past; float32 Parquet numbers are the numbers written; a CSV
    row with an unquoted comma, a file that is not UTF-8 and one that is not what its name says fail."""
    entry = {"fields": {"question": "q", "answer": "a"}, "domain": "d", "verifier": "number"}
    (tmp_path / "bom.csv").write_text("\ufeffq,a\nhow many?,3\n")
    assert [t.answer for t in load_tasks(DatasetSpec(path=str(tmp_path / "bom.csv"), **entry))] == ["3"]
    pq.write_table(pa.table({"q": ["price?"], "a": pa.array([1266.77], pa.float32())}), tmp_path / "p.parquet")
    assert [t.answer for t in load_tasks(DatasetSpec(path=str(tmp_path / "p.parquet"), **entry))] == ["1266.77"]
    (tmp_path / "ragged.csv").write_text("q,a\nhello, I cannot log in,3\n")
    with pytest.raises(RowFormatError, match=r"ragged\.csv: line 2: 3 values where the header has 2 columns"):
        load_tasks(DatasetSpec(path=str(tmp_path / "ragged.csv"), **entry))
    (tmp_path / "latin1.csv").write_bytes("q,a\ncaf\xe9?,3\n".encode("latin-1"))
    with pytest.raises(RowFormatError, match=r"latin1\.csv: cannot be read as its name says \(UnicodeDecodeError"):
        load_tasks(DatasetSpec(path=str(tmp_path / "latin1.csv"), **entry))
    (tmp_path / "fake.parquet").write_text("q,a\n")
    with pytest.raises(RowFormatError, match=r"fake\.parquet: cannot be read as its name says"):
        load_tasks(DatasetSpec(path=str(tmp_path / "fake.parquet"), **entry))
    (tmp_path / "twice.csv").write_text("q,a,a\nhow many?,3,4\n")
    with pytest.raises(RowFormatError, match=r"twice\.csv: line 1: the header repeats the column\(s\) \['a'\]"):
        load_tasks(DatasetSpec(path=str(tmp_path / "twice.csv"), **entry))
    (tmp_path / "broken.json").write_text('[{"q": "how many?", "a": 3},\n]\n')
    with pytest.raises(RowFormatError, match=r"broken\.json:2: not a JSON document"):
        load_tasks(DatasetSpec(path=str(tmp_path / "broken.json"), **entry))


@pytest.mark.parametrize("entry, message", [
    ({}, r"data\.datasets\.0: .*give format \(a built-in: math500.*\) or a field map"),
    ({"format": "math500", "domain": "algebra", "template": "{problem}"},
     r"format math500 is a built-in field map; give it or template \(a field map of your own\), not both"),
    ({"format": "mmlu", "fields": {"question": "q"}, "verifier": "choice"},
     r"format mmlu is a built-in field map; give it or fields \(a field map of your own\)"),
    ({"format": "trivia"}, r"data\.datasets\.0\.format: Input should be 'math500'"),
    ({"fields": {"question": "q", "answer": "a"}, "domain": "d", "verifier": "fuzzy"},
     r"data\.datasets\.0\.verifier: .*'fuzzy' is not a verifier; known: math, choice, number, text, exact, "
     r"humaneval, mbpp, lcb_stdin, lcb_functional, python, judge"),
    ({"fields": {"question": "q", "answer": "a"}, "domain": "d"},
     r"verifier is required with a field map \(math, choice, number, text, exact, humaneval, mbpp, lcb_stdin, "
     r"lcb_functional, python, judge, http\)"),
    ({"fields": {"question": "q", "answer": "a"}, "template": "{q}", "domain": "d", "verifier": "text"},
     r"fields\.question and template both give the question"),
    ({"fields": {"question": "q", "answer": "a"}, "verifier": "text"}, r"fields\.domain \(a column\) or domain"),
    ({"fields": {"question": "q", "answer": "a", "domain": "s"}, "domain": "d", "verifier": "text"},
     r"fields\.domain \(a column\) or domain \(a constant\), exactly one"),
    ({"fields": {"question": "q"}, "domain": "d", "verifier": "math"}, r"fields\.answer is required: verifier math"),
    ({"fields": {"question": "q", "answer": "a"}, "domain": "d", "verifier": "choice"},
     r"meta lacks num_options, which verifier choice reads"),
    ({"template": "{0} and {q.x}", "fields": {"answer": "a"}, "domain": "d", "verifier": "text"},
     r"template '\{0\} and \{q\.x\}': \{0\} is not a column name"),
    ({"template": "no fields", "fields": {"answer": "a"}, "domain": "d", "verifier": "text"}, r"names no column"),
    ({"fields": {"question": "q", "answer": "a", "colour": "c"}, "domain": "d", "verifier": "text"},
     r"data\.datasets\.0\.fields\.colour: unknown key"),
])
def test_bad_maps_fail_at_config_load_naming_the_setting(tmp_path, entry, message):
    with pytest.raises(ConfigError, match=message):
        spec_from_yaml(tmp_path, {"path": "data.jsonl", **entry})


def test_presets_and_the_config_agree_on_the_built_in_names(tmp_path):
    assert set(get_args(PresetName)) == set(PRESETS)
    assert spec_from_yaml(tmp_path, {"format": "gsm8k", "path": "g.jsonl", "limit": 5}).format == "gsm8k"


def test_an_id_two_entries_both_give_fails_naming_both(tmp_path):
    from conductor.tasks import load_datasets

    entry = {"fields": {"question": "q", "answer": "a"}, "domain": "support", "verifier": "text"}
    first = DatasetSpec(path=write_jsonl(tmp_path / "march.jsonl", [{"q": "one", "a": "x"}]), **entry)
    second = DatasetSpec(path=write_jsonl(tmp_path / "april.jsonl", [{"q": "two", "a": "y"}]), **entry)
    with pytest.raises(RowFormatError, match=r"april\.jsonl: id 'support/0' is also an id of data\.datasets\[0\]"):
        load_datasets([first, second])
    apart = second.model_copy(update={"id_prefix": "april/"})
    assert [t.id for t in load_datasets([first, apart])] == ["support/0", "april/0"]
