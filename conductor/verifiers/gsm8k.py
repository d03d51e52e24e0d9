"""GSM8K-style numeric answers: gold after ``####``; the response's ``#### N`` (else ``\\boxed{N}``, else
"answer is N", else its last number), compared as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Optional

from conductor.verifiers.math_answer import extract_boxed
from conductor.verifiers.verdict import Verdict

_NUMBER = r"-?\$?\d[\d,]*(?:\.\d+)?"
_MARKED = re.compile(rf"####\s*({_NUMBER})")
_STATED = re.compile(rf"answer\s*(?:is|:)\s*\**\s*({_NUMBER})", re.IGNORECASE)
_ANY = re.compile(_NUMBER)


def gold_number(answer_field: str) -> str:
    return answer_field.split("####")[-1].strip()


def to_decimal(text: str) -> Optional[Decimal]:
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip(".%")
    try:
        return Decimal(cleaned).normalize()
    except (InvalidOperation, ValueError):
        return None


def extract_number(response: str) -> Optional[str]:
    for pattern in (_MARKED, _STATED):
        found = pattern.findall(response)
        if found:
            return found[-1]
    boxed = extract_boxed(response)
    if boxed is not None and to_decimal(boxed) is not None:
        return boxed
    found = _ANY.findall(response)
    return found[-1] if found else None


def verify_number(gold: str, response: str) -> Verdict:
    predicted = extract_number(response)
    if predicted is None:
        return Verdict(False, None, "no number found")
    expected, got = to_decimal(gold), to_decimal(predicted)
    return Verdict(expected is not None and got is not None and expected == got, predicted.strip())
