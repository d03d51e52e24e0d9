"""The unseen task types' report pieces on synthetic outcomes: the per-domain table's derived row and its
fallbacks (conductor/evaluation/domain_table.py), and the criterion's verdict (unseen_report.py)."""

import math

import pytest

from conductor.evaluation.domain_table import NAME, fallback_methods, generalist, table_rows, with_domain_table
from conductor.evaluation.outcome import Outcome
from conductor.evaluation.report import AVERAGE, summarise
from conductor.evaluation.unseen_report import criterion, unseen_json, unseen_sections

TABLE = {  # a measured menu as workflow_prior.json holds it: per domain, items and their softmax weights
    "code": {"a": 0.7, "b": 0.2, "a>b": 0.1},
    "math": {"a": 0.1, "b": 0.3, "b>a": 0.6},
}


def outcomes_of(method: str, domain: str, right: list[bool], tokens: int = 100) -> list[Outcome]:
    return [Outcome(method=method, task_id=f"{domain}/{k}", domain=domain, repeat=0, correct=r, worker_calls=1,
                    worker_prompt_tokens=tokens, worker_completion_tokens=0, conductor_tokens=0, usd=0.0,
                    latency_s=0.0, steps=1, rounds=1, workers=("a",), access=("[]",))
            for k, r in enumerate(right)]


def test_the_table_reads_its_rows_and_its_generalist():
    assert table_rows(TABLE) == {"code": "single:a", "math": "solve_check:b>a"}
    # a: ln 0.7 + ln 0.1 = -2.66; b: ln 0.2 + ln 0.3 = -2.81: a has the higher mean reward over the domains
    assert generalist(TABLE) == "single:a"
    assert fallback_methods(TABLE) == ["single:a", "solve_check:b>a"]
    assert generalist({"code": {"a": 1.0}, "math": {"b>a": 1.0}}) is None  # no worker measured alone everywhere


def test_a_domain_with_a_row_copies_it_and_one_without_takes_the_best_fallback():
    rows = (outcomes_of("single:a", "code", [True, False]) + outcomes_of("single:b", "code", [True, True])
            + outcomes_of("single:a", "aime", [False, False, True]) + outcomes_of("single:b", "aime", [True] * 3)
            + outcomes_of("solve_check:b>a", "aime", [True, True, False]))
    derived, chosen = with_domain_table(rows, TABLE)
    table = summarise(derived)
    assert chosen["code"] == {"method": "single:a", "how": "row"}  # its row, though b is better on these items
    assert table[NAME]["code"].accuracy == 0.5
    # single:b is no fallback of this table (neither a row nor its generalist): the best of its fallbacks
    assert chosen["aime"]["method"] == "solve_check:b>a" and "chosen on these items" in chosen["aime"]["how"]
    assert table[NAME]["aime"].accuracy == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="none of its fallbacks"):
        with_domain_table(outcomes_of("single:b", "gpqa", [True]), TABLE)


def synthetic(conductor_right: dict[str, int], n: int = 40) -> list[Outcome]:
    """Two singles on three types of n items: s1 right on 20 of each, s2 on 10, the Conductor as given."""
    rows = []
    for domain in ("aime", "mbpp", "physchem"):
        rows += outcomes_of("single:s1", domain, [k < 20 for k in range(n)])
        rows += outcomes_of("single:s2", domain, [k < 10 for k in range(n)])
        rows += outcomes_of("conductor", domain, [k < conductor_right[domain] for k in range(n)])
    return rows


def test_the_criterion_needs_the_average_above_and_no_type_below_by_more_than_one_se():
    passing = synthetic({"aime": 30, "mbpp": 18, "physchem": 22})  # mbpp 5 points below: within 1 s.e. (7.9)
    table = summarise(passing)
    result = criterion(table, passing, "conductor")
    assert result["pass"] and result[AVERAGE]["best_single"] == "single:s1"
    assert result["mbpp"]["difference"] == pytest.approx(-0.05) and not result["mbpp"]["below_by_more_than_1se"]
    assert result["mbpp"]["se"]["conductor"] == pytest.approx(math.sqrt(18 / 40 * 22 / 40 / 39))
    assert result["mbpp"]["se"]["paired"] == pytest.approx(math.sqrt(0.05 * 0.95 / 39))
    assert result["mbpp"]["differs_under"] == ["paired"]  # 2 questions in 40 apart: a paired s.e. of 3.5 points
    failing = synthetic({"aime": 40, "mbpp": 10, "physchem": 22})  # average above, mbpp 25 points below
    result = criterion(summarise(failing), failing, "conductor")
    assert result[AVERAGE]["difference"] > 0 and result["mbpp"]["below_by_more_than_1se"] and not result["pass"]


def test_the_report_shows_the_sections_and_the_verdict():
    rows = synthetic({"aime": 30, "mbpp": 18, "physchem": 22})
    table = summarise(rows)
    meta = {"unseen_calibration": {"s1": {"aime": 0.5, "mbpp": 0.5, "physchem": 0.5},
                                   "s2": {"aime": 0.25, "mbpp": 0.3, "physchem": 0.25}}}
    text = "\n".join(unseen_sections(table, rows, meta))
    assert "assumed, not the paper's" in text and "astronomy" in text
    assert "| s1 | 50.00 vs 50.00 | 50.00 vs 50.00 | 50.00 vs 50.00 | yes |" in text
    assert "| s2 |" in text and text.split("| s2 |")[1].split("\n")[0].endswith("| NO |")  # mbpp 25 vs 30
    assert "| conductor |" in text and "| PASS |" in text and "(differs under the paired s.e.)" in text
    assert "| paper, conductor | +20.00 | +2.00 | +6.06 | +9.35 |" in text
    assert unseen_json(table, rows)["unseen_criterion"]["conductor"]["pass"] is True
    assert unseen_sections(summarise(outcomes_of("single:s1", "code", [True])), [], {}) == []
