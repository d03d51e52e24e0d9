import json
import threading

import pytest

from conductor.tasks.formats import preset_tasks
from conductor.verifiers.gsm8k import extract_number, gold_number, verify_number
from conductor.verifiers.math_answer import extract_boxed, normalise_latex, verify_math
from conductor.verifiers.multiple_choice import extract_letter, shuffle_options, verify_choice
from conductor.verifiers.text_match import verify_text


def jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_math500_gold_matches_its_boxed_solution_and_not_a_neighbours(shared_data):
    rows = jsonl(shared_data / "math500.jsonl")
    assert len(rows) == 500
    own = sum(verify_math(r["answer"], r["solution"]).correct for r in rows)
    assert own >= 0.98 * len(rows), own

    def neighbour(i):  # the next row whose answer is genuinely different
        k = 1
        while normalise_latex(rows[(i + k) % len(rows)]["answer"]) == normalise_latex(rows[i]["answer"]):
            k += 1
        return rows[(i + k) % len(rows)]

    cross = sum(verify_math(r["answer"], neighbour(i)["solution"]).correct for i, r in enumerate(rows))
    assert cross < 0.01 * len(rows), cross


@pytest.mark.parametrize("gold, response, correct", [
    ("\\frac{1}{2}", "so the answer is \\boxed{0.5}", True),
    ("\\frac{14}{3}", "$\\boxed{\\dfrac{14}{3}}$", True),
    ("x^2+1", "\\boxed{1+x^2}", True),
    ("10", "\\boxed{11}", False),
    ("3", "no box here, the answer is 3", True),
    ("5", "", False),
])
def test_math_equivalence(gold, response, correct):
    assert verify_math(gold, response).correct is correct


def test_math_verification_works_off_the_main_thread():
    results = []
    threads = [threading.Thread(target=lambda: results.append(verify_math("\\frac{1}{2}", "\\boxed{0.50}").correct))
               for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == [True, True, True]


def test_extract_boxed_handles_nesting_and_last_box():
    assert extract_boxed("\\boxed{1} then \\boxed{\\frac{a}{b}}") == "\\frac{a}{b}"
    assert extract_boxed("\\boxed{unclosed") is None


def test_gsm8k_gold_verifies_against_itself_not_a_neighbour(shared_data):
    rows = jsonl(shared_data / "gsm8k.jsonl")
    golds = [gold_number(r["answer"]) for r in rows]
    assert all(verify_number(g, f"work...\n#### {g}").correct for g in golds)
    assert all(verify_number(golds[i], r["answer"]).correct for i, r in enumerate(rows))
    wrong = [verify_number(golds[i], f"#### {golds[(i + 1) % len(golds)]}").correct
             for i in range(len(golds)) if golds[i] != golds[(i + 1) % len(golds)]]
    assert wrong and not any(wrong)


@pytest.mark.parametrize("response, expected", [
    ("work\n#### 1,234", "1,234"), ("The answer is $18.", "$18"), ("\\boxed{42}", "42"), ("I get 3 then 7", "7"),
])
def test_gsm8k_extraction(response, expected):
    assert extract_number(response) == expected


def test_gsm8k_numeric_comparison():
    assert verify_number("1234", "#### 1,234.00").correct
    assert not verify_number("18", "#### 180").correct


@pytest.mark.parametrize("response", [
    "Answer: C", "(C)", "**C**", "The answer is C.", "Thinking about (A) and (B)... final: **C**",
    "so the answer is (C)", "\\boxed{C}", "Answer: **C**", "C",
])
def test_letter_extraction(response):
    assert extract_letter(response, 4) == "C"


def test_letter_extraction_rejects_out_of_range_and_articles():
    assert extract_letter("Answer: E", 4) is None
    assert extract_letter("the answer is a good one", 4) is None
    assert not verify_choice("B", "no idea", 4).correct


def test_option_shuffle_is_seeded_and_recorded(shared_data):
    rows = jsonl(shared_data / "mmlu_stem.jsonl")[:200]
    first, again = preset_tasks(rows, "mmlu", seed=7), preset_tasks(rows, "mmlu", seed=7)
    assert [t.prompt for t in first] == [t.prompt for t in again]
    assert [t.answer for t in first] != [t.answer for t in preset_tasks(rows, "mmlu", seed=8)]
    for task, row in zip(first, rows):
        permutation = task.meta["permutation"]
        gold_position = "ABCDEFGHIJ".index(task.answer)
        assert permutation[gold_position] == row["answer"]
        assert f"({task.answer}) {row['choices'][row['answer']]}" in task.prompt
        assert verify_choice(task.answer, f"Answer: {task.answer}", task.meta["num_options"]).correct


def test_shuffle_options_keeps_every_choice():
    shuffled, permutation, gold = shuffle_options(["w", "x", "y", "z"], 2, seed=1, key="k")
    assert sorted(shuffled) == ["w", "x", "y", "z"] and shuffled["ABCD".index(gold)] == "y"


def test_text_match_normalises():
    assert verify_text("The Eiffel Tower", "Answer: eiffel tower!").correct
    assert verify_text("blue", "Thinking...\nblue").correct
    assert not verify_text("blue", "Answer: red").correct
    assert not verify_text("Blue", "Answer: blue", exact=True).correct


def test_gsm8k_task_prompt_carries_format_instruction(shared_data):
    task = preset_tasks(jsonl(shared_data / "gsm8k.jsonl")[:1], "gsm8k")[0]
    assert "#### N" in task.prompt and task.answer == "18"
