"""Option-letter extraction: the phrasings real models use (collected from published MMLU-Pro outputs and the
extractors of lm-evaluation-harness, simple-evals, the MMLU-Pro scripts, OpenCompass, Qwen's eval, openbench and
inspect_ai), on 10-option (A-J) and 4-option questions, and text that only mentions options."""

from __future__ import annotations

import json
import random
import string
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conductor.tasks.formats import preset_tasks
from conductor.verifiers.multiple_choice import LETTERS, extract_letter, verify_choice

TEN = "ABCDEFGHIJ"

# id -> final statement. {L}: the chosen letter, {l}: it in lowercase, {T}: the chosen option's text,
# {D}: another option's letter. Every one must read exactly {L}.
PHRASINGS = {
    "answer_colon": "Answer: {L}",                                   # the prompt's own format; simple-evals
    "answer_colon_caps": "ANSWER: {L}",                              # inspect_ai
    "answer_colon_dollar": "Answer: ${L}$",                          # simple-evals 'Answer: $LETTER'
    "answer_colon_paren_text": "Answer: ({L}) {T}",
    "answer_colon_option": "Answer: Option {L}",
    "answer_bold_label": "**Answer:** {L}",
    "answer_bold_all": "**Answer: {L}**",
    "final_answer_colon": "Final answer: {L}",
    "correct_answer_colon": "Correct answer: ({L}) {T}",
    "answer_is": "The answer is {L}.",
    "answer_is_paren": "The answer is ({L}).",                       # lm-eval / MMLU-Pro 'answer is \(?X\)?'
    "therefore_answer_is": "Therefore, the answer is ({L})",         # MMLU-Pro CoT few-shot format
    "answer_is_letter_dot_text": "The answer is {L}. {T}",           # GPT-4o on MMLU-Pro
    "answer_is_paren_text": "The answer is ({L}) {T}",
    "correct_answer_bold_text": "The correct answer is **({L}) {T}**",
    "best_answer_is": "The best answer is {L}.",                     # Llama 3 style
    "answer_would_be": "So the answer would be ({L}).",
    "answer_is_inline_latex": "The answer is \\( {L} \\).",          # DeepSeek-Coder-V2 on MMLU-Pro
    "answer_is_code": "The answer is `{L}`.",                        # Qwen1.5 on MMLU-Pro
    "boxed": "\\boxed{{{L}}}",
    "boxed_text": "$\\boxed{{\\text{{{L}}}}}$",
    "final_answer_boxed": "Final Answer: The final answer is $\\boxed{{{L}}}$",  # Llama 3.1 / Gemini
    "boxed_textbf_paren": "\\boxed{{\\textbf{{({L})}}}}",
    "textbf_paren": "The answer is $\\textbf{{({L})}}$",
    "correct_option_is": "The correct option is {L}.",
    "closest_option_is": "The closest option is ({L}) {T}.",
    "most_appropriate_is": "The most appropriate choice here is ({L}).",
    "choose": "I would choose {L}.",
    "go_with_option": "I'll go with option {L}.",
    "letter_is_correct_answer": "{L} is the correct answer.",
    "paren_is_correct": "({L}) is correct.",
    "option_is_correct": "Therefore, option {L} is correct.",
    "making_correct": "This rules out the rest, making option {L} the correct answer.",
    "header_final_answer": "### Final Answer\n{L}",
    "header_bold_label_text": "**Final Answer**\n\n**{L}) {T}**",
    "intro_then_label_text": "The correct option is:\n\n{L}. {T}",     # Jamba / DeepSeek on MMLU-Pro
    "last_line_letter": "{L}",
    "last_line_letter_dot": "{L}.",
    "last_line_paren": "({L})",
    "last_line_bold": "**{L}**",
    "last_line_option": "Option {L}",
    "last_line_letter_paren_text": "{L}) {T}",
    "last_line_letter_dot_text": "{L}. {T}",
    "last_line_paren_text": "({L}) {T}",
    "answer_tag": "<answer>{L}</answer>",
    "chinese_colon": "答案：{L}",                                     # OpenCompass
    "chinese_is": "所以答案是{L}。",
    "lowercase_answer_line": "answer: {l}",
    "not_but": "The answer is not {D}, but {L}.",
    "so_letter": "So, {L}.",
    "bold_at_line_end": "Final pick: **{L}**",
    "corresponds_to": "Our value corresponds to option ({L}).",
    "reasoning_closed": "<think>Maybe the answer is {D}? No, check again.</think>\nAnswer: {L}",
}

# Text that only mentions options; every sentence must leave the choice to the final statement.
MENTIONS = [
    "Options {d1} and {d2} are both plausible, let me check.",
    "({d1}) is wrong because it ignores friction.",
    "Let's eliminate {d1}, {d2} and {d3}.",
    "Option {d1} ({t1}) is too small.",
    "I think the key quantity is the net force.",
    "A quick estimate gives roughly {t2}.",
    "If the answer is {d2}, the mass would be negative.",
    "The answer is not {d3}.",
    "Neither {d1} nor {d2} is correct.",
    "{d3} would be correct only if the gas were ideal.",
    "Is the answer {d1}? Not obviously.",
    "Comparing ({d2}) {t2} with ({d3}) {t3}, the second is closer.",
    "I considered {d1} first.",
]
NOT_READ = [  # (text, num_options): never a choice
    ("Options A and B are both plausible, let me check", 4),
    ("(A) is wrong because it ignores friction.", 4),
    ("Let's eliminate A, B and C", 4),
    ("Let's eliminate A, B and C", 10),
    ("I think the answer needs more work.", 10),
    ("I'm not sure.", 10),
    ("A car travels at 30 m/s for 2 s.", 4),
    ("Answer: A car travels at 30 m/s.", 4),
    ("Answer: I don't know", 10),            # inspect_ai issue #2216
    ("ANSWER: None of the above", 10),
    ("The answer is (None of the above)", 10),
    ("Answer seems to be A", 4),             # openbench issue #348
    ("the answer is a good one", 4),
    ("The answer is not A.", 4),
    ("The answer isn't A.", 4),
    ("If the answer is A, the mass is negative.", 4),
    ("Is the answer A?", 4),
    ("Could the answer be J?", 10),
    ("Neither A nor B is correct.", 4),
    ("A would be correct only if the gas were ideal.", 4),
    ("Answer: A, C", 4),
    ("The answer is (D) and (E).", 10),
    ("The answer is either A or B.", 4),
    ("The answer is (A), (C), (E), or (J).", 10),
    ("Vitamin D is the correct answer.", 4),
    ("Answer choices:\nA. 1\nB. 2\nC. 3\nD. 4", 4),
    ("Now, let's evaluate the options:\n\nA. Begging the Question: the premise assumes the conclusion", 4),
    ("A. 12 N\nB. 24 N\nC. 36 N", 4),
    ("The answer is 42 N.", 10),             # the option's text alone: deliberately not mapped back
    ("so the answer is j.", 10),             # lowercase only in an 'answer: x' last line
    ("<think>The answer is A", 4),           # reasoning that never closed
    ("F_k = \\sqrt{\\frac{I}{k_B T}}", 10),
    ("The correct formula is (A (I-1, J) + A (I+1, J)) / 4", 10),
    ("", 4),
]


def _render(template: str, letter: str, text: str, other: str) -> str:
    return template.format(L=letter, l=letter.lower(), T=text, D=other)


def _question(rng: random.Random, num_options: int = 10) -> tuple[list[str], str]:
    """An MMLU-Pro-style question: distinct numeric options with units, and a gold letter."""
    values = rng.sample(range(2, 400), num_options)
    unit = rng.choice(["N", "J", "m/s", "kg", "W", "mol"])
    return [f"{v} {unit}" for v in values], rng.choice(LETTERS[:num_options])


def _reasoning(rng: random.Random, options: list[str], gold: str) -> str:
    others = [c for c in LETTERS[:len(options)] if c != gold]
    d1, d2, d3 = rng.sample(others, 3)
    fill = {"d1": d1, "d2": d2, "d3": d3, "t1": options[LETTERS.index(d1)], "t2": options[LETTERS.index(d2)],
            "t3": options[LETTERS.index(d3)]}
    sentences = [s.format(**fill) for s in rng.sample(MENTIONS, rng.randint(3, 6))]
    return "Let's think step by step. " + " ".join(sentences)


@pytest.mark.parametrize("num_options, letters", [(10, "AIJ"), (4, "ABD")])
@pytest.mark.parametrize("phrasing", sorted(PHRASINGS))
def test_each_phrasing_reads_its_letter(phrasing, num_options, letters):
    for letter in letters:
        other = "B" if letter != "B" else "C"
        statement = _render(PHRASINGS[phrasing], letter, "42 N", other)
        assert extract_letter(statement, num_options) == letter, statement
        mentions = f"Options {other} and {letter} are both plausible, let me check. I think {other} fails."
        assert extract_letter(f"{mentions}\n\n{statement}", num_options) == letter, statement


@pytest.mark.parametrize("phrasing", sorted(PHRASINGS))
def test_held_out_ten_option_set_is_read_perfectly(phrasing):
    """300 synthetic 10-option questions per phrasing, each answer after reasoning that mentions other options."""
    rng = random.Random(zlib.crc32(phrasing.encode()))
    misread = []
    for _ in range(300):
        options, gold = _question(rng)
        reasoning = _reasoning(rng, options, gold)
        other = rng.choice([c for c in TEN if c != gold])
        statement = _render(PHRASINGS[phrasing], gold, options[TEN.index(gold)], other)
        response = f"{reasoning}\n\n{statement}"
        if extract_letter(response, 10) != gold:
            misread.append(response)
    assert not misread, f"{len(misread)}/300 misread, e.g. {misread[0]!r}"


def test_held_out_reasoning_that_only_mentions_options_has_no_choice():
    rng = random.Random(5)
    for _ in range(300):
        options, gold = _question(rng)
        reasoning = _reasoning(rng, options, gold)
        assert extract_letter(reasoning, 10) is None, reasoning


@pytest.mark.parametrize("text, num_options", NOT_READ)
def test_mentions_pronouns_articles_negations_and_lists_are_not_choices(text, num_options):
    assert extract_letter(text, num_options) is None


@pytest.mark.parametrize("text", [
    "I think this is hard. I'm fairly sure I would choose J.",
    "I. It makes the orbit of Io slightly elliptical.",
    "The answer is I.",
    "Answer: I",
    "I believe (I) is correct.",
])
def test_option_i_is_read_but_the_pronoun_never_is(text):
    assert extract_letter(text, 10) == ("J" if "choose J" in text else "I")


def test_the_final_statement_wins():
    assert extract_letter("The answer is (A). Wait, that ignores friction. Therefore, the answer is (J).", 10) == "J"
    assert extract_letter("(A) is wrong, (B) is wrong, (C) is correct.", 4) == "C"
    assert extract_letter("Answer: C\n\nExplanation: D would be correct only if the gas were ideal.", 4) == "C"
    assert extract_letter("The answer is (B) or (J), but the best one is (J).", 10) == "J"
    assert extract_letter("The answer is J.\nThe answer is (D) and (E).", 10) is None  # final statement: no single
    assert extract_letter("The answer is (A). Actually no: (B) is correct.", 4) == "B"


def test_letters_beyond_the_options_are_rejected():
    assert extract_letter("Answer: E", 4) is None
    assert extract_letter("Answer: K", 10) is None
    assert extract_letter("The answer is B.\n\nAnswer: E", 4) is None  # the final explicit statement is invalid
    assert extract_letter("The answer is B. So P is correct.", 4) == "B"  # a weak cue with a stray capital: skipped
    assert extract_letter("Answer: Z", 26) == "Z"
    assert extract_letter("Answer: Z", 25) is None
    assert extract_letter("Answer: B", 2) == "B"
    for bad in (0, 27):
        with pytest.raises(ValueError):
            extract_letter("Answer: A", bad)


def test_negated_answer_with_a_correction_reads_the_correction():
    assert extract_letter("The answer is not A", 4) is None
    assert extract_letter("The answer is not A but rather C.", 4) == "C"


def test_reasoning_blocks():
    assert extract_letter("<think>the answer is A</think>\nThe answer is (C).", 4) == "C"
    assert extract_letter("<think>the answer is A</think>\nI am not sure.", 4) is None
    assert extract_letter("<think>the answer is A... let me check", 4) is None


def test_full_width_and_unicode_forms():
    assert extract_letter("答案：Ｃ", 4) == "C"
    assert extract_letter("The answer is （J）.", 10) == "J"


@given(st.text(alphabet=string.ascii_letters + string.digits + " \n()[]*_.:,$\\{}`-", max_size=200),
       st.integers(min_value=1, max_value=26))
def test_never_raises_and_only_returns_a_valid_letter(text, num_options):
    letter = extract_letter(text, num_options)
    assert letter is None or letter in LETTERS[:num_options]


def test_long_adversarial_responses_stay_fast():
    import time

    for text in ("**" * 20000, "(A) " * 20000, "A, " * 20000, "answer:" + " " * 20000 + "x",
                 "\\text{" * 5000 + "A" + "}" * 5000, " \n" * 20000 + "A", "The answer is (A) and (B). " * 3000):
        start = time.perf_counter()
        extract_letter(text, 10)
        assert time.perf_counter() - start < 2.0, text[:20]


def test_mmlu_stem_rows_verify_under_a_seeded_shuffle(shared_data):
    """Real MMLU-STEM rows (read in place), options shuffled with a recorded seed, answered in every phrasing."""
    rows = [json.loads(line) for line in (shared_data / "mmlu_stem.jsonl").read_text().splitlines() if line.strip()]
    tasks = preset_tasks(rows, "mmlu", seed=11)
    phrasings = sorted(PHRASINGS)
    rng = random.Random(11)
    for index, (task, row) in enumerate(zip(tasks, rows)):
        num_options = task.meta["num_options"]
        gold_text = row["choices"][row["answer"]].strip() or "(blank)"
        wrong = rng.choice([c for c in LETTERS[:num_options] if c != task.answer])
        wrong_text = row["choices"][task.meta["permutation"][LETTERS.index(wrong)]].strip() or "(blank)"
        template = PHRASINGS[phrasings[index % len(phrasings)]]
        reasoning = f"Let's think step by step. Option {wrong} ({wrong_text[:40]}) does not fit. I think it is clear."
        right = verify_choice(task.answer, f"{reasoning}\n\n{_render(template, task.answer, gold_text, wrong)}",
                              num_options)
        assert right.correct and right.extracted == task.answer, (index, template)
        miss = verify_choice(task.answer, f"{reasoning}\n\n{_render(template, wrong, wrong_text, task.answer)}",
                             num_options)
        assert not miss.correct and miss.extracted == wrong, (index, template)
