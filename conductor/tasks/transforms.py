"""Row logic a field map cannot express, one named transform per built-in format that needs one: option
shuffling (MMLU, GPQA), the gold number after ``#### `` (GSM8K), assert tests (MBPP) and LiveCodeBench's
encoded tests. Each finishes a mapped Draft in place and raises FieldError for a field the row lacks."""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import re
import zlib
from typing import Any

from conductor.tasks.field_map import Draft, FieldError, Row, required
from conductor.verifiers.gsm8k import gold_number
from conductor.verifiers.multiple_choice import LETTERS, format_options, shuffle_options


def gsm8k_gold(draft: Draft, row: Row, seed: int) -> None:
    """The reference is the number after GSM8K's ``#### ``, not its worked solution."""
    draft.answer = gold_number(draft.answer)


def _options(draft: Draft, choices: list[str], answer_index: int, seed: int) -> None:
    """Shuffle the options per task id and seed, so a position bias cannot be learnt; the gold becomes a letter."""
    shuffled, permutation, gold = shuffle_options(choices, answer_index, seed, draft.id)
    draft.question = f"{draft.question}\n\n{format_options(shuffled)}"
    draft.answer = gold
    draft.meta = {"permutation": permutation, "num_options": len(choices), "shuffle_seed": seed, **draft.meta}


def mmlu_options(draft: Draft, row: Row, seed: int) -> None:
    """MMLU: ``choices`` and ``answer`` as an index (or a letter)."""
    choices = [str(c) for c in required(row, ["choices"])]
    answer = required(row, ["answer"])
    letter = str(answer).strip().upper()
    index = answer if isinstance(answer, int) else LETTERS.find(letter) if len(letter) == 1 else -1
    if not 0 <= index < len(choices):
        raise FieldError("answer", f"{answer!r} names none of the {len(choices)} options")
    _options(draft, choices, index, seed)


def gpqa_options(draft: Draft, row: Row, seed: int) -> None:
    """GPQA's CSV: the correct answer and three incorrect ones in columns of their own."""
    columns = ["Correct Answer"] + [f"Incorrect Answer {k}" for k in (1, 2, 3)]
    draft.question = draft.question.strip()
    _options(draft, [str(required(row, [column])).strip() for column in columns], 0, seed)


def mbpp_tests(draft: Draft, row: Row, seed: int) -> None:
    """The problem sentence first (it keys the simulator's lookup), then the first assert, which shows the
    function's name and call shape as MBPP's own prompt does; the verifier runs every assert."""
    tests = [str(t) for t in required(row, ["test_list"])]
    if not tests:
        raise FieldError("test_list", "no tests")
    code = draft.answer
    defined = re.findall(r"^def\s+(\w+)\s*\(", code, re.MULTILINE)
    called = [name for name in defined if re.search(rf"\b{re.escape(name)}\s*\(", tests[0])]
    draft.question = f"{draft.question}\n\nYour code should pass this test:\n\n{tests[0]}"
    draft.answer = code.rstrip() + "\n"
    draft.meta = {"tests": tests, "test_imports": [str(i) for i in row.get("test_imports") or []],
                  "entry_point": (called or defined or [None])[-1]}


def decode_lcb_tests(value: Any) -> list[dict[str, Any]]:
    """LiveCodeBench stores tests as JSON, or (private tests) as base64(zlib(pickle(JSON string))).
    The pickle is read with an unpickler that refuses every global, so it can only yield plain data."""
    if isinstance(value, list):
        return value
    text = str(value)
    try:
        return json.loads(text)
    except ValueError:
        pass
    raw = zlib.decompress(base64.b64decode(text))
    decoded = _PlainDataUnpickler(io.BytesIO(raw)).load()
    return json.loads(decoded) if isinstance(decoded, (str, bytes)) else decoded


class _PlainDataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a dataset file")


def _tests(row: Row, column: str, default: str) -> list[dict[str, Any]]:
    try:
        return decode_lcb_tests(row.get(column) or default)
    except (ValueError, binascii.Error, zlib.error, pickle.UnpicklingError) as exc:
        raise FieldError(column, f"not readable test cases ({exc})") from None


def lcb_tests(draft: Draft, row: Row, seed: int) -> None:
    """LiveCodeBench: public and private tests decoded; functional (a method of the starter code) or stdin."""
    tests = _tests(row, "public_test_cases", "[]")
    if row.get("private_test_cases"):
        tests = tests + _tests(row, "private_test_cases", "[]")
    metadata = row.get("metadata") or {}
    metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
    functional = bool(tests) and tests[0].get("testtype") == "functional"
    starter = str(row.get("starter_code") or "")
    io_rule = ("Implement the method in the starter code." if functional
               else "Read the input from standard input and write the answer to standard output.")
    draft.question += f"\n\n{io_rule}"
    if starter:
        draft.question += f"\n\nStarter code:\n```python\n{starter}\n```"
    draft.verifier = "lcb_functional" if functional else "lcb_stdin"
    draft.meta = {"tests": tests, "func_name": metadata.get("func_name"), "starter_code": starter, **draft.meta}
