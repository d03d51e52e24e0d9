"""Math answers: read the last ``\\boxed{}`` of a response and compare it with the gold answer using
math-verify (gold first, as its API expects), inside a deadline-bounded worker process."""

from __future__ import annotations

import re
from typing import Optional

from conductor.verifiers.deadline import DeadlineExceeded, DeadlineRunner
from conductor.verifiers.verdict import Verdict

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_RUNNER = DeadlineRunner()
TAIL_CHARS = 600  # with no \boxed{}, math-verify reads the answer from the end of the response


def extract_boxed(text: str) -> Optional[str]:
    """Content of the last ``\\boxed{...}`` (balanced braces), or None."""
    for match in reversed(list(_BOX.finditer(text))):
        depth, start = 1, match.end()
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i].strip()
    return None


def normalise_latex(answer: str) -> str:
    answer = re.sub(r"\\(?:left|right|displaystyle|!|,|;|\s)", "", answer)
    answer = re.sub(r"\\[dt]frac", r"\\frac", answer)
    return re.sub(r"\s+", "", answer).rstrip(".").replace("^{\\circ}", "").replace("^\\circ", "")


def _compare_in_worker(gold: str, predicted: str, timeout_s: int) -> bool:
    from math_verify import parse, verify

    gold_parsed = parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout_s)
    predicted_parsed = parse(predicted, parsing_timeout=timeout_s)
    if not gold_parsed or not predicted_parsed:
        return False
    return bool(verify(gold_parsed, predicted_parsed, timeout_seconds=timeout_s))


def verify_math(gold: str, response: str, timeout_s: float = 5.0) -> Verdict:
    boxed = extract_boxed(response)
    if boxed is not None and normalise_latex(boxed) == normalise_latex(gold):
        return Verdict(True, boxed, "exact match")
    candidate = f"\\boxed{{{boxed}}}" if boxed is not None else response[-TAIL_CHARS:]
    try:
        correct = _RUNNER.run(_compare_in_worker, gold, candidate, max(1, int(timeout_s)), timeout_s=timeout_s + 2)
    except DeadlineExceeded as exc:
        return Verdict(False, boxed, f"timeout: {exc}")
    except Exception as exc:  # a math-verify failure on odd input is a wrong answer, not a crash
        return Verdict(False, boxed, f"math-verify error: {type(exc).__name__}")
    return Verdict(correct, boxed, "math-verify")
