"""Exact and normalised string answers (short factual or synthetic tasks): the response's ``\\boxed{}``,
else its last ``Answer:`` line, else its last non-empty line, compared after normalisation
(case, Unicode form, punctuation, articles, whitespace)."""

from __future__ import annotations

import re
import string
import unicodedata
from typing import Optional

from conductor.verifiers.math_answer import extract_boxed
from conductor.verifiers.verdict import Verdict

_ANSWER_LINE = re.compile(r"answer\s*[:\-]\s*(.+)", re.IGNORECASE)
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).lower().translate(_PUNCTUATION)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def extract_answer(response: str) -> Optional[str]:
    boxed = extract_boxed(response)
    if boxed is not None:
        return boxed
    lines = [line.strip() for line in response.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        match = _ANSWER_LINE.search(line)
        if match:
            return match.group(1).strip().strip("*").strip()
    return lines[-1] if lines else None


def verify_text(gold: str, response: str, exact: bool = False) -> Verdict:
    answer = extract_answer(response)
    if answer is None:
        return Verdict(False, None, "empty response")
    same = answer.strip() == gold.strip() if exact else normalise(answer) == normalise(gold)
    return Verdict(same, answer)
