"""Multiple choice: a seeded option shuffle (recorded, so a rollout can be re-checked) and extraction of the chosen
option letter from free text (see ``extract_letter`` for the phrasings read and the ones deliberately not read)."""

from __future__ import annotations

import random
import re
import string
from collections.abc import Callable, Sequence
from typing import Optional

from conductor.verifiers.verdict import Verdict

LETTERS = string.ascii_uppercase


def shuffle_options(choices: Sequence[str], answer_index: int, seed: int, key: str) -> tuple[list[str], list[int], str]:
    """Return (shuffled choices, permutation (new position -> original index), gold letter)."""
    permutation = list(range(len(choices)))
    random.Random(f"{seed}:{key}").shuffle(permutation)
    shuffled = [choices[i] for i in permutation]
    return shuffled, permutation, LETTERS[permutation.index(answer_index)]


def format_options(choices: Sequence[str]) -> str:
    return "\n".join(f"({LETTERS[i]}) {choice}" for i, choice in enumerate(choices))


# Building blocks. Words match in any case, the option letter only as a capital (a lone lowercase "a" or "i" is
# English far more often than an option), and it must stand alone: never part of a word, "I'm" or "A's".
_W = r"[*_`]*+"  # markdown emphasis, inline code (possessive quantifiers keep every pattern linear-time)
_G = r"[\s*_`]*+"  # glue between tokens: whitespace and emphasis
_OPEN = r"[(\[]?"
_CLOSE = r"[)\]]?"
_L = r"(?<![A-Za-z0-9])(?P<L>[A-Z])(?![A-Za-z0-9])"
_ADVERB = (r"(?:then|thus|therefore|hence|clearly|definitely|indeed|actually|simply|just|likely|most\s+likely|"
           r"probably|obviously|certainly|still|now|again|approximately|roughly|(?:closest|nearest)\s+to)")
_VERB = rf"(?:is|was|becomes|remains|(?:would|should|must|will)(?:\s+{_ADVERB})?\s+be)"
# "is", "is:", "would be", ":", "-", or a space before a bracketed letter ("we get the answer (H)")
_CONNECT = rf"(?:\s++{_VERB}(?:\s+{_ADVERB})*\s*+[:：]?|\s*+[:：=]|\s++[-–—]|\s++(?=[*_]*+[(\[]))"
_LABEL = rf"{_G}(?i:(?:option|choice|letter){_G}[:：]?)?{_G}{_OPEN}{_G}{_L}"
_RIGHT = r"(?:the\s+)?(?:(?:most\s+)?(?:correct|right|best|only\s+correct)(?:\s+(?:answer|option|choice|one))?|answer)"
_VERDICT = (rf"(?i:(?:is|would\s+be|must\s+be|seems\s+to\s+be|appears\s+to\s+be)(?:\s+(?:clearly|definitely|thus|"
            rf"therefore|indeed|then))?\s+{_RIGHT})\b")


def _rx(pattern: str) -> re.Pattern:
    return re.compile(pattern, re.MULTILINE)


# Explicit statements of a choice (see extract_letter for examples of each).
_ANSWER_IS = _rx(rf"(?i:\b(?:answer|ans)\b(?:\s+(?:choice|option|letter)\b)?){_W}(?i:{_CONNECT}){_LABEL}")
_BEST_IS = _rx(rf"(?i:\b(?:(?:correct|right|best|final|closest|nearest|only\s+correct|most\s+[a-z]+)"
               rf"(?:\s+[a-z-]+){{1,3}}?|(?:my|our)\s+(?:final\s+)?(?:option|choice|pick|selection|guess|bet)))"
               rf"{_W}(?i:{_CONNECT}){_LABEL}")
_CHOOSE = _rx(r"(?i:(?:\b(?:I|we)(?:['’](?:d|ll)|\s+(?:would|will|shall|should|must|can))?\s+(?:(?:also|then|"
              r"therefore|thus|finally|now)\s+)?(?:choose|select|pick|go\s+with|opt\s+for)|\bI['’]m\s+(?:going\s+"
              r"with|choosing|selecting|picking)|\blet['’]?s\s+(?:choose|select|pick|go\s+with))\b)" + _LABEL)
_BOXED = _rx(rf"\\boxed\s*+\{{{_G}(?i:(?:option|choice|answer){_G}[:：]?)?{_G}{_OPEN}{_G}{_L}[^{{}}]*\}}")
_ANSWER_TAG = _rx(rf"(?i:<answer>){_G}(?i:(?:option|choice)\s++)?{_G}{_OPEN}{_G}{_L}")
_ANSWER_HEADER = _rx(rf"^[ \t#>*_]*+(?i:(?:(?:final|correct|my|the)\s+)*answer)[ \t*_:：]*+\n{_G}"
                     rf"(?:[-•][ \t]++)?{_W}(?i:(?:option|choice)\s++)?{_W}{_OPEN}{_W}{_L}")
_CHINESE = _rx(rf"(?:答案\s*+(?:应该|应)?\s*+(?:是|为|选)?|(?:故|因此|所以)\s*+选)\s*+[:：]?{_G}{_OPEN}{_G}{_L}")
_NOT_BUT = _rx(rf"(?i:\banswer\s+is\s+not)\s++{_W}{_OPEN}[A-Z]{_CLOSE}{_W}\s*+[,;]?\s*+(?i:but|rather|instead)"
               rf"(?i:\s+rather)?\s*+,?\s*+(?i:it\s+is\s+|option\s+)?{_W}{_OPEN}{_G}{_L}")
_LETTER_IS_RIGHT = _rx(rf"(?<![*_`])(?i:(?:option|choice)\s++)?{_W}{_OPEN}{_W}{_L}{_W}{_CLOSE}{_W}\s++{_VERDICT}")
_MAKING = _rx(rf"(?i:\b(?:making|makes|make)\s+(?:option\s+|choice\s+)?){_W}{_OPEN}{_W}{_L}{_W}{_CLOSE}{_W}\s++"
              rf"(?i:{_RIGHT})\b")
_CONCLUSION = _rx(rf"(?i:\b(?:so|thus|therefore|hence|consequently)\b)[ \t]*+,?[ \t]*+(?i:(?:it|this)\s+(?:is|must\s+"
                  rf"be|has\s+to\s+be|should\s+be)\s+|(?:the\s+)?(?:option|choice)\s+)?{_W}{_OPEN}{_G}{_L}")
# The last line on its own: "J", "(J)", "J.", "**J**", "Option J", "J) 42", "J. 42", "**(J) 42**"; or "answer: j".
_LABEL_LINE = re.compile(rf"[ \t]*+(?:[-•>*][ \t]++)?(?P<pre>{_W})(?P<opt>(?i:(?:option|choice)[ \t]++)?){_W}{_OPEN}"
                         rf"{_W}(?P<L>[A-Z])(?P<post>{_W})(?P<sep>[.:：)\]]?)(?P<rest>.*)")
_LOWERCASE_LINE = re.compile(rf"[ \t#>*_]*+(?i:answer)[ \t]*+[:：][ \t]*+{_W}[(\[]?(?P<L>[a-z])[)\]]?{_W}[ \t]*+\.?"
                             r"[ \t]*+")
# Weak cues, read only when no statement is present: a bold letter closing a line ("... final: **C**"), a value
# mapped to an option ("which corresponds to option (C)", "5 V, or (I).", "This is (B)."), a bracketed letter
# ending the response ("... the ability to set prices (J).").
_BOLD_AT_LINE_END = _rx(rf"(?:\*\*|__)[ \t]*+{_OPEN}[ \t]*+{_L}[ \t]*+{_CLOSE}[ \t]*+[.:]?[ \t]*+(?:\*\*|__)"
                        r"(?=[ \t]*+[.!]?[ \t]*+$)")
_MAPPED_TO = _rx(rf"(?i:(?:\b(?:correspond(?:s|ing)?\s+to|match(?:es|ing)?|,\s+or)\s+(?:the\s+)?(?:(?:option|choice)"
                 rf"\s+)?|\bwhich\s+is\s+(?:option|choice)\s+|\b(?:this|that|which|it)\s+is\s+(?=[*_]*+[(\[]))){_W}"
                 rf"{_OPEN}{_G}{_L}")
_BRACKETED_AT_END = re.compile(rf"[(\[]{_L}[)\]][*_]*+[ \t]*+[.!]?[*_ \t]*+\s*+\Z")

# Guards.
_SEPARATORS = r"(?:\s*+(?:,|/|&|\band\b|\bor\b|\bvs\.?|\bversus\b|\bthrough\b|\bto\b))++\s*+"
_CLOSERS = re.compile(r"[)\]}*_\"“”`]*+")
_LIST_AFTER = re.compile(rf"{_SEPARATORS}{_W}(?i:(?:option|choice)\s++)?{_W}[(\[]?[A-Z](?![A-Za-z0-9])")
_PAREN_LIST_BEFORE = re.compile(rf"[(\[][A-Z][)\]]{_W}{_SEPARATORS}{_W}(?i:(?:option|choice)\s++)?{_W}[(\[]$")
_LIST_BEFORE = re.compile(rf"(?<![\w.])[A-Z][)\]]?{_W}{_SEPARATORS}{_W}(?i:(?:option|choice)\s++)?{_W}$")
_WORD_AFTER_LETTER = re.compile(r"(?i:because|since|as|given|due|which|being|per|here|from|with|for|assuming|if|"
                                r"considering|based|according|though|although|but|however|while|whereas|so|then|"
                                r"in|on|at)\b")
_HYPOTHETICAL_BEFORE = re.compile(
    r"(?i:\b(?:if|whether|unless|suppose|supposing|assume|assuming|doubt|not\s+sure|unsure|nor|neither|either|"
    r"wonder(?:ing)?|don['’]t\s+think|do\s+not\s+think|doesn['’]t\s+think)\s+(?:that\s+)?(?:the\s+|my\s+|our\s+|"
    r"your\s+)?(?:\w+\s+)?)[*_(\[]*$")
_CONDITION_AFTER = re.compile(r"(?i:[ \t]*,?[ \t]*(?:only\s+)?(?:if|when|unless|provided|assuming)\b)")
_CLAUSE_WORDS = frozenset("so thus therefore hence clearly then only that and but because since here obviously "
                          "evidently definitely indeed finally overall conclusion summary short means think believe "
                          "guess say feel conclude suspect reckon know see".split())
# A verdict on a label ("(B) is also incorrect", "(A) fails"), as opposed to the option's own text ("(C) is a star").
_VERDICT_ON_LABEL = re.compile(
    r"(?i:(?:is|are|was|were|seems?(?:\s+to\s+be)?|appears?(?:\s+to\s+be)?|would\s+be|could\s+be|might\s+be|"
    r"must\s+be|can(?:not|'t)?\s+be)\s+(?:(?:also|not|clearly|definitely|partially|still|therefore|thus|then|"
    r"obviously|indeed)\s+)*(?:incorrect|wrong|false|correct|right|true|invalid|valid|eliminated|ruled|excluded|"
    r"unlikely|likely|possible|impossible|plausible|closest|best|better|worse|too|the\s+(?:correct|right|best|"
    r"answer))\b|(?:isn't|wasn't|aren't|doesn't|does\s+not|fails?|cannot|can't|also|too|vs\.?|versus)\b)")
_LINE_START = re.compile(r"[ \t]*+(?:[-•>*][ \t]++)?[*_`]*+(?i:(?:option|choice)[ \t]++)?[*_`]*+[(\[]?[*_`]*+")
_LIST_INTRO = re.compile(r"(?i:(?:\b(?:let['’]?s|we\s+(?:will|can|should|need\s+to|must))\s+(?:now\s+)?(?:evaluate|"
                         r"analy[sz]e|examine|consider|review|go\s+through|look\s+at|check)\b|\b(?:options|choices|"
                         r"alternatives)\s+(?:are|include)\b|^\W*(?:options|choices|answer\s+choices)\b)[^\n]*:\W*$)")
_TRAILING_NOISE = re.compile(r"\s*+(?:-{3,}|\*{3,}|_{3,}|```\w*|</?\w+>)?\s*+")
_LATEX_WRAPPER = re.compile(r"\\(?:text|textbf|textrm|textit|textsf|mathrm|mathbf|mathit|mathsf|mathtt|operatorname)"
                            r"\s*\{([^{}]*)\}")
_FULLWIDTH = {**{0xFF21 + i: LETTERS[i] for i in range(26)}, ord("（"): "(", ord("）"): ")"}


def _normalise(text: str) -> str:
    """Unwrap LaTeX and full-width forms: "$\\textbf{(J)}$", "\\( J \\)" and "Ｊ" read as "(J)", " J ", "J"."""
    text = text.translate(_FULLWIDTH).replace("\\fbox", "\\boxed")
    for _ in range(3):  # "\boxed{\textbf{\text{J}}}" at most; deeper nesting is not an answer
        text = _LATEX_WRAPPER.sub(r"\1", text)
    return re.sub(r"\\[()\[\]]", " ", text).replace("$", "")


def _final_part(text: str) -> str:
    """The committed part of a response: after the last ``</think>``; nothing if reasoning never closed."""
    if "</think>" in text:
        return text.rsplit("</think>", 1)[1]
    return "" if "<think>" in text else text


def _listed(text: str, start: int, end: int) -> bool:
    """Is the letter at ``text[start:end]`` one of several ("A, B or C", "(D) and (E)", "A/B")?"""
    before = text[max(0, start - 40):start]
    if (_PAREN_LIST_BEFORE if before.endswith(("(", "[")) else _LIST_BEFORE).search(before):
        return True
    return _LIST_AFTER.match(text, _CLOSERS.match(text, end).end()) is not None


def _stands_alone(text: str, start: int, end: int) -> bool:
    """Does the letter at ``text[start:end]`` close its statement ("J.", "J because", "(J) 42", "J\\n"), rather than
    begin a sentence ("I think", "A car"), sit in a list ("A, B or C"), or end a question ("is it A?")?"""
    if re.match(r"['’][A-Za-z]", text[end:]) or _listed(text, start, end):
        return False
    closed = _CLOSERS.match(text, end)
    end, bracketed = closed.end(), ")" in closed.group() or "]" in closed.group()
    if text[max(0, start - 4):start].rstrip("*_`").endswith(("(", "[")) and not bracketed:  # "(A (I-1, J) + ..."
        return False
    rest = text[end:]
    if re.match(r"[^.!?。！？\n]*[?？]", rest):
        return False
    if not rest or rest[0] == "\n":
        return True
    if rest[0] in " \t":
        after = rest.lstrip(" \t")
        if bracketed:  # "(D) magnesium at the cathode": the option's text follows, unless a verdict on it does
            return _VERDICT_ON_LABEL.match(after) is None
        return (not after or after[0] in "\n([{\\-–—.,;:!*_\"'“" or after[0].isupper() or after[0].isdigit()
                or _WORD_AFTER_LETTER.match(after) is not None)
    return rest[0] not in "=+^/&-'’([{" and not rest[0].isalnum()


def _hypothetical(text: str, start: int) -> bool:
    """Is the statement starting at ``start`` framed as a hypothesis ("if the answer is A", "neither A nor B")?"""
    return _HYPOTHETICAL_BEFORE.search(text[max(0, start - 80):start]) is not None


def _starts_clause(text: str, start: int) -> bool:
    """The subject of "... is correct" must open a clause, not end a name ("Vitamin D is correct")."""
    before = text[max(0, start - 80):start].rstrip(" \t*_([\"'“")
    if not before or not before[-1].isalnum():
        return True
    word = re.search(r"(\w+)$", before)
    return word is not None and word.group(1).lower() in _CLAUSE_WORDS


def _label_line(line: str) -> Optional[re.Match]:
    """A line that is an option label, alone or followed by the option's text; not a verdict ("(B) is wrong")."""
    match = _LABEL_LINE.fullmatch(line)
    if match is None:
        return None
    rest = match.group("rest").strip("*_` \t")
    if not rest:
        return match
    # "J." / "J)" / "Option J" / "**J**" mark a label; "F_k = ..." and "I think" do not
    marked = match.group("sep") or match.group("opt") or (match.group("pre") and match.group("post"))
    formula = rest[0] in "=<>+^/"  # "[H] = k[Hg]": a variable, not a label
    return match if marked and not formula and not _VERDICT_ON_LABEL.match(rest) and "?" not in rest else None


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    end = text.find("\n", pos)
    return text.rfind("\n", 0, pos) + 1, len(text) if end < 0 else end


def _previous_line(text: str, pos: int) -> str:
    """The closest non-blank line before the line holding ``pos``."""
    start = _line_bounds(text, pos)[0]
    while start > 0:
        start, end = _line_bounds(text, start - 1)
        if text[start:end].strip():
            return text[start:end]
    return ""


def _next_line(text: str, pos: int) -> str:
    """The closest non-blank line after the line holding ``pos``."""
    end = _line_bounds(text, pos)[1]
    while end < len(text):
        start, end = _line_bounds(text, end + 1)
        if text[start:end].strip():
            return text[start:end]
    return ""


def _in_list(text: str, pos: int) -> bool:
    """Is the letter at ``pos`` one label of an enumeration of options (a neighbouring line is a label too)?"""
    if not _LINE_START.fullmatch(text, _line_bounds(text, pos)[0], pos):
        return False
    return _label_line(_previous_line(text, pos)) is not None or _label_line(_next_line(text, pos)) is not None


def _clean(text: str, match: re.Match) -> bool:
    return _stands_alone(text, match.start("L"), match.end("L")) and not _hypothetical(text, match.start())


def _asserted(text: str, match: re.Match) -> bool:
    return not _hypothetical(text, match.start())


def _verdict_ok(text: str, match: re.Match) -> bool:
    return (_starts_clause(text, match.start()) and not _hypothetical(text, match.start())
            and not _CONDITION_AFTER.match(text, match.end()))


# (pattern, check, explicit). An explicit statement is final even when it names no single valid option: "Answer: E"
# on a 4-option question, or "The answer is (D) and (E)", make the result None unless a later statement follows.
# The other cues are skipped when their capital is out of range ("the key factor is T") or one of several.
_STATEMENTS: list[tuple[re.Pattern, Callable[[str, re.Match], bool], bool]] = [
    (_ANSWER_IS, _clean, True),
    (_BEST_IS, _clean, False),
    (_CHOOSE, _clean, True),
    (_BOXED, _clean, True),
    (_ANSWER_TAG, _clean, True),
    (_ANSWER_HEADER, _clean, True),
    (_CHINESE, _clean, True),
    (_NOT_BUT, _clean, True),
    (_LETTER_IS_RIGHT, _verdict_ok, False),
    (_MAKING, _asserted, False),
    (_CONCLUSION, _clean, False),
]


def _last_line_choice(text: str) -> Optional[tuple[int, str]]:
    """A last line that is only an option label (optionally with the option's text), or "answer: j"."""
    end = len(text)
    while True:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end]
        if start == 0 or not _TRAILING_NOISE.fullmatch(line):
            break
        end = start - 1
    lowercase = _LOWERCASE_LINE.fullmatch(line)
    if lowercase:
        return start + lowercase.start("L"), lowercase.group("L").upper()
    match = _label_line(line)
    if match is None:
        return None
    pos = start + match.start("L")
    previous = _previous_line(text, pos)
    if _in_list(text, pos) or len(previous) < 400 and _LIST_INTRO.search(previous):
        return None
    return pos, match.group("L")


def extract_letter(text: str, num_options: int) -> Optional[str]:
    r"""The option letter a response commits to, or None when it states no single valid choice.

    Phrasings collected from evaluation harnesses and from published model outputs: EleutherAI lm-evaluation-harness
    (MMLU-Pro ``answer is (X)`` filter, MMLU/GPQA ``multi_choice_regex``, the article-"a" pitfall of PR #4188),
    OpenAI simple-evals (``Answer: $X``, issue #33 on repeated "Answer:"), TIGER-Lab MMLU-Pro ``evaluate_from_api``
    (answer-is, then "Answer:", then a bare letter) and its published 10-option outputs (GPT-4o, Gemini 1.5,
    Llama 3.1, Qwen1.5, DeepSeek-Coder-V2, Jamba 1.5, Mixtral, Mistral, Phi-3, Command-R, Yi ...), OpenCompass
    ``first_option_postprocess`` (English and Chinese phrasings, ``</think>`` split), Qwen's chat-MMLU
    ``extract_choice`` (negation guard, "X is correct", "choose X"), gpt-oss/openbench MCQ patterns (markdown,
    ``\boxed``, "Option X", a line that is only the letter; openbench issue #348 "Answer seems to be A") and
    inspect_ai issue #2216 ("ANSWER: I don't know" read as D and I).

    1. Statements of a choice. They are equally strong and the LAST one in the response wins, so a response that
       discusses options, or changes its mind, is read by its final statement:
       - "Answer: J", "ANSWER: (J)", "Answer: $J$", "**Answer:** J", "**Answer: J**", "Final answer: J",
         "Correct answer: (J) 42", "Answer: Option J", "The answer is (J)", "Therefore, the answer is (J)",
         "The answer is J. 42", "the correct answer is **(J) 42**", "The best answer is J.", "the answer would be
         (J)", "The answer is \( J \)", "The answer is `J`", "The answer is $\textbf{(J)}$", "Answer:\n\nJ"
       - "\boxed{J}", "$\boxed{\text{J}}$", "\boxed{\textbf{(J)}}", "The final answer is: $\boxed{J}$"
       - "The correct option is J", "The closest option is (J) 42", "the most appropriate choice is (J)",
         "My choice: J"
       - "I would choose J", "I'll go with option J", "I'm going with J", "Let's select J"
       - "J is the correct answer", "(J) is correct", "Therefore, option J is correct", "making option J the
         correct answer" (the letter must open the clause: never "Vitamin D is correct")
       - "<answer>J</answer>"; a heading "### Final Answer" / "**Final Answer**" followed by the label;
         "答案：J", "答案是J", "故选J"
       - "So, J.", "Therefore, option J", "Thus it must be (J)"
       - "The answer is not A, but J" -> J
       - the last line being only a label, alone or with the option's text: "J", "J.", "(J)", "**J**", "Option J",
         "J) 42", "J. 42", "(J) 42", "**J) 42**" (after "The correct option is:" too; not when the line ends a
         list of options or follows "Let's evaluate the options:"); or "answer: j", the only place a lowercase
         letter is read
    2. Only when no statement is present, weak cues: a bold letter closing a line ("Final pick: **J**"), a value
       mapped to an option ("which corresponds to option (J)", "5 V, or (J).", "This is (J)."), and a bracketed
       letter that ends the response ("... the ability to set prices (J).").

    LaTeX ("$J$", "\( J \)", "\textbf{(J)}"), markdown emphasis, inline code and full-width letters are unwrapped
    first; text before a closing ``</think>`` is ignored, and an unclosed ``<think>`` means nothing was committed.

    Never read as a choice: text that only mentions options ("Options A and B are both plausible", "(A) is wrong
    because ...", "Let's eliminate A, B and C", a list of options); the pronoun "I" or the article "A" ("I think",
    "Answer: I don't know", "Answer: A car travels ..."); negated, hypothetical or conditional statements ("the
    answer is not A", "if the answer is A", "neither A nor B is correct", "A would be correct only if ..."); a
    question ("Is the answer A?"); several letters ("Answer: A, C", "The answer is (D) and (E)": as the final
    statement these make the result None); a letter beyond ``num_options`` (a final "Answer: E" on a 4-option
    question gives None). Deliberately not handled: the option's text without its letter ("The answer is 42 N"),
    since the verifier is given no option texts and fuzzy matching would credit answers that never commit to an
    option; and lowercase letters outside an "answer: j" last line ("a"/"i" are English words).
    """
    if not 1 <= num_options <= len(LETTERS):
        raise ValueError(f"num_options must be 1..{len(LETTERS)}, got {num_options}")
    text = _normalise(_final_part(text or ""))
    valid = LETTERS[:num_options]
    found: list[tuple[int, str]] = []  # (position, letter); "" for an explicit statement of no single valid option
    for pattern, check, explicit in _STATEMENTS:
        for match in pattern.finditer(text):
            letter, start = match.group("L"), match.start("L")
            if letter not in valid and not explicit or _in_list(text, start):
                continue
            if check(text, match):
                found.append((start, letter if letter in valid else ""))
            elif explicit and _listed(text, start, match.end("L")) and not _hypothetical(text, match.start()):
                found.append((start, ""))  # "The answer is (D) and (E)"
    last_line = _last_line_choice(text)
    if last_line is not None and last_line[1] in valid:
        found.append(last_line)
    if not found:
        loose = [*_BOLD_AT_LINE_END.finditer(text), *_MAPPED_TO.finditer(text), *_BRACKETED_AT_END.finditer(text)]
        found = [(match.start("L"), match.group("L")) for match in loose
                 if match.group("L") in valid and _clean(text, match) and not _in_list(text, match.start("L"))]
    if not found:
        return None
    return max(found)[1] or None


def verify_choice(gold_letter: str, response: str, num_options: int) -> Verdict:
    letter = extract_letter(response, num_options)
    if letter is None:
        return Verdict(False, None, "no option letter found")
    return Verdict(letter == gold_letter, letter)
