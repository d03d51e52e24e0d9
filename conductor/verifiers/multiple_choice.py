"""Multiple choice: a seeded option shuffle (recorded, so a rollout can be re-checked) and letter
extraction from free text ("Answer: C", "(C)", "**C**", "The answer is C.", "\\boxed{C}")."""

from __future__ import annotations

import random
import re
import string
from typing import Optional, Sequence

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


def _patterns(letters: str) -> list[re.Pattern]:
    cls = f"[{letters}]"
    return [
        re.compile(rf"answer\s*(?:is|:|=)?\s*(?:option\s*)?[:\-]?\s*[\(\[]?\**\s*({cls})\b(?![\w'])", re.IGNORECASE),
        re.compile(rf"\\boxed\{{\s*(?:\\text(?:bf)?\{{)?\s*\(?({cls})\)?"),
        re.compile(rf"\*\*\s*\(?({cls})\)?[.:]?\s*\*\*"),
        re.compile(rf"\(({cls})\)"),
        re.compile(rf"^\s*({cls})\s*[.)]?\s*$", re.MULTILINE),
    ]


def extract_letter(text: str, num_options: int) -> Optional[str]:
    """The chosen letter, by the strongest pattern present (its last occurrence); None if none."""
    letters = LETTERS[:num_options]
    for pattern in _patterns(letters):
        matches = [m.group(1) for m in pattern.finditer(text)]
        matches = [m for m in matches if m.isupper()]
        if matches:
            return matches[-1]
    return None


def verify_choice(gold_letter: str, response: str, num_options: int) -> Verdict:
    letter = extract_letter(response, num_options)
    if letter is None:
        return Verdict(False, None, "no option letter found")
    return Verdict(letter == gold_letter, letter)
