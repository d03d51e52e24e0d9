"""A dataset entry's row filters (``include``, ``exclude``, ``drop_duplicates``; conductor/tasks/row_filter.py)
and a format's constant domain renamed (``domain``): the rows kept, the ids they get, and the errors a filter
naming a missing field, or keeping nothing, gives (file, row, field)."""

import pytest

from conductor.config_loader import ConfigError
from conductor.tasks import load_tasks
from conductor.tasks.field_map import RowFormatError
from tests.test_dataset_field_map import spec_from_yaml, write_csv, write_jsonl

ROWS = [{"q": "What is 1 + 1?", "a": "2", "kind": "easy", "source": "x"},
        {"q": "What is 6 * 7?", "a": "42", "kind": "hard", "source": "x"},
        {"q": "What is 1 + 1?", "a": "2", "kind": "easy", "source": "y"},   # repeats row 1's question and answer
        {"q": "What is 2 + 3?", "a": "5", "kind": "easy", "source": "z"},
        {"q": "What is 9 - 4?", "a": "5", "kind": "tricky", "source": "x"}]
MAP = {"fields": {"question": "q", "answer": "a"}, "domain": "sums", "verifier": "number"}


def entry(tmp_path, **filters):
    return spec_from_yaml(tmp_path, {"path": write_jsonl(tmp_path / "sums.jsonl", ROWS), **MAP, **filters})


def test_filters_keep_rows_in_file_order_and_row_index_ids_count_the_rows_kept(tmp_path):
    tasks = load_tasks(entry(tmp_path, include={"kind": ["easy", "tricky"]}, exclude={"source": ["z"]},
                             drop_duplicates=["q", "a"]))
    assert [t.answer for t in tasks] == ["2", "5"] and tasks[1].prompt.startswith("What is 9 - 4?")
    assert [t.id for t in tasks] == ["sums/0", "sums/1"]  # as if the kept rows were the file
    assert [t.id for t in load_tasks(entry(tmp_path))] == [f"sums/{i}" for i in range(5)]  # no filter: all rows


def test_exclude_takes_reasons_and_compares_as_text(tmp_path):
    """{value: why} leaves out the same rows as a list; a CSV's '7' matches a config's 7."""
    path = write_csv(tmp_path / "sums.csv", [{"id": i, **row} for i, row in enumerate(ROWS, start=5)])
    listed = spec_from_yaml(tmp_path, {"path": path, **MAP, "exclude": {"id": [7, 9]}})
    reasoned = spec_from_yaml(tmp_path, {"path": path, **MAP, "exclude": {"id": {7: "a repeat", 9: "ambiguous"}}})
    assert [t.answer for t in load_tasks(listed)] == [t.answer for t in load_tasks(reasoned)] == ["2", "42", "5"]


def test_a_filter_naming_a_missing_field_fails_at_load_naming_file_row_and_field(tmp_path):
    rows = ROWS[:3] + [{"q": "What is 4 + 4?", "a": "8", "source": "x"}]  # row 4 has no kind
    path = write_jsonl(tmp_path / "sums.jsonl", rows)
    for name, value in (("include", {"kind": ["easy"]}), ("exclude", {"kind": ["hard"]}),
                        ("drop_duplicates", ["q", "kind"])):
        spec = spec_from_yaml(tmp_path, {"path": path, **MAP, name: value})
        with pytest.raises(RowFormatError, match=rf"sums\.jsonl: row 4: field 'kind': missing, which {name} names "
                                                 r"\(the row has \['a', 'q', 'source'\]\)"):
            load_tasks(spec)


def test_a_row_error_after_filtering_names_the_files_row(tmp_path):
    rows = ROWS[:3] + [{"q": "", "a": "8", "kind": "easy", "source": "x"}]
    spec = spec_from_yaml(tmp_path, {"path": write_jsonl(tmp_path / "sums.jsonl", rows), **MAP,
                                     "exclude": {"kind": ["hard"]}})
    with pytest.raises(RowFormatError, match=r"sums\.jsonl: row 4: field 'q': empty or null"):
        load_tasks(spec)


def test_filters_that_keep_no_row_fail_at_load(tmp_path):
    with pytest.raises(RowFormatError, match=r"sums\.jsonl: the filters \(include, exclude, drop_duplicates\) "
                                             r"keep none of its 5 rows"):
        load_tasks(entry(tmp_path, include={"kind": ["impossible"]}))


@pytest.mark.parametrize("filters, message", [
    ({"include": {"kind": []}}, r"data\.datasets\.0\.include\.kind: List should have at least 1 item"),
    ({"exclude": {"kind": {}}}, r"data\.datasets\.0\.exclude\.kind"),
    ({"include": {"kind": [["easy"]]}}, r"data\.datasets\.0\.include\.kind\.0"),
    ({"drop_duplicates": [""]}, r"data\.datasets\.0\.drop_duplicates\.0: String should have at least 1 character"),
])
def test_a_malformed_filter_fails_at_config_load_naming_the_setting(tmp_path, filters, message):
    with pytest.raises(ConfigError, match=message):
        entry(tmp_path, **filters)


def test_a_format_takes_a_domain_of_its_own(tmp_path):
    """The simulator's MMLU physics and chemistry rows are 'physchem': the domain, the ids and so the option
    order (shuffled per id) follow the new name."""
    rows = [{"question": f"Q{i}?", "type": "college_physics", "choices": ["a", "b", "c", "d"], "answer": i % 4}
            for i in range(6)]
    path = write_jsonl(tmp_path / "mmlu.jsonl", rows)
    plain = load_tasks(spec_from_yaml(tmp_path, {"format": "mmlu", "path": path}))
    renamed = load_tasks(spec_from_yaml(tmp_path, {"format": "mmlu", "path": path, "domain": "physchem"}))
    assert [t.id for t in renamed] == [f"physchem/{i}" for i in range(6)] and {t.domain for t in renamed} == {
        "physchem"}
    assert [t.meta["permutation"] for t in plain] != [t.meta["permutation"] for t in renamed]
