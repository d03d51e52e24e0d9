"""Row layouts of the supported datasets, each turned into Tasks with an answer-format instruction.

MATH-500 / AIME (problem, answer), GSM8K (question, answer ending in ``#### N``), MMLU (question, choices,
answer index), GPQA CSV (Question, Correct Answer, Incorrect Answer 1-3), HumanEval (task_id, prompt,
test, entry_point), MBPP sanitized (task_id, prompt, code, test_imports, test_list of asserts) and
LiveCodeBench (question_content, starter_code, public/private test cases, metadata with func_name).
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zlib
from collections.abc import Callable, Iterable
from typing import Any

from conductor.tasks.task import Task
from conductor.verifiers.gsm8k import gold_number
from conductor.verifiers.multiple_choice import format_options, shuffle_options

MATH_INSTRUCTION = "Put the final answer in \\boxed{}."
NUMBER_INSTRUCTION = "End the response with '#### N', where N is the final number."
CHOICE_INSTRUCTION = "End the response with 'Answer: X', where X is the letter of the correct option."
CODE_INSTRUCTION = "Return the complete solution in a single ```python code block."

Row = dict[str, Any]


class RowFormatError(ValueError):
    """A dataset row that lacks a field its layout needs."""


def _field(row: Row, *names: str) -> Any:
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    raise RowFormatError(f"row has none of the fields {names}; it has {sorted(row)}")


def math_tasks(rows: Iterable[Row], domain: str = "math", seed: int = 0) -> list[Task]:
    tasks = []
    for index, row in enumerate(rows):
        task_id = str(row.get("unique_id") or row.get("id") or index)
        problem = _field(row, "problem", "question")
        tasks.append(Task(f"{domain}/{task_id}", domain, f"{problem}\n\n{MATH_INSTRUCTION}",
                          str(_field(row, "answer")), "math",
                          {"subject": row.get("subject"), "level": row.get("level")}))
    return tasks


def gsm8k_tasks(rows: Iterable[Row], seed: int = 0) -> list[Task]:
    return [Task(f"gsm8k/{row.get('idx', index)}", "gsm8k", f"{_field(row, 'question')}\n\n{NUMBER_INSTRUCTION}",
                 gold_number(str(_field(row, "answer"))), "number")
            for index, row in enumerate(rows)]


def _choice_task(task_id: str, domain: str, question: str, choices: list[str], answer_index: int, seed: int,
                 subject: str | None) -> Task:
    shuffled, permutation, gold = shuffle_options(choices, answer_index, seed, task_id)
    prompt = f"{question}\n\n{format_options(shuffled)}\n\n{CHOICE_INSTRUCTION}"
    return Task(task_id, domain, prompt, gold, "choice",
                {"permutation": permutation, "num_options": len(choices), "shuffle_seed": seed, "subject": subject})


def mmlu_tasks(rows: Iterable[Row], seed: int = 0, domain: str = "mmlu") -> list[Task]:
    """Ids ``{domain}/{row index}``; the option order is shuffled per id, so ``domain`` is part of it."""
    tasks = []
    for index, row in enumerate(rows):
        choices = [str(c) for c in _field(row, "choices")]
        answer = _field(row, "answer")
        answer_index = answer if isinstance(answer, int) else "ABCDEFGHIJ".index(str(answer).strip().upper())
        tasks.append(_choice_task(f"{domain}/{index}", domain, str(_field(row, "question")), choices, answer_index,
                                  seed, row.get("type") or row.get("subject")))
    return tasks


def gpqa_tasks(rows: Iterable[Row], seed: int = 0) -> list[Task]:
    tasks = []
    for index, row in enumerate(rows):
        choices = [str(_field(row, "Correct Answer")).strip()] + [
            str(_field(row, f"Incorrect Answer {k}")).strip() for k in (1, 2, 3)]
        task_id = f"gpqa/{row.get('Record ID') or index}"
        tasks.append(_choice_task(task_id, "gpqa", str(_field(row, "Question")).strip(), choices, 0, seed,
                                  row.get("Subdomain")))
    return tasks


def humaneval_tasks(rows: Iterable[Row], seed: int = 0) -> list[Task]:
    return [Task(str(_field(row, "task_id")), "code",
                 f"Complete this Python function.\n\n```python\n{_field(row, 'prompt')}```\n\n{CODE_INSTRUCTION}",
                 str(row.get("canonical_solution") or ""), "humaneval",
                 {"prompt": row["prompt"], "test": _field(row, "test"), "entry_point": _field(row, "entry_point")})
            for row in rows]


def mbpp_tasks(rows: Iterable[Row], seed: int = 0) -> list[Task]:
    """The problem sentence first (it keys the simulator's lookup), then the first assert, which shows the
    function's name and call shape as MBPP's own prompt does; the verifier runs every assert."""
    tasks = []
    for row in rows:
        tests = [str(t) for t in _field(row, "test_list")]
        code = str(_field(row, "code"))
        defined = re.findall(r"^def\s+(\w+)\s*\(", code, re.MULTILINE)
        called = [name for name in defined if re.search(rf"\b{re.escape(name)}\s*\(", tests[0])]
        prompt = f"{_field(row, 'prompt')}\n\nYour code should pass this test:\n\n{tests[0]}\n\n{CODE_INSTRUCTION}"
        tasks.append(Task(f"mbpp/{_field(row, 'task_id')}", "mbpp", prompt, code.rstrip() + "\n", "mbpp",
                          {"tests": tests, "test_imports": [str(i) for i in row.get("test_imports") or []],
                           "entry_point": (called or defined or [None])[-1]}))
    return tasks


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


def livecodebench_tasks(rows: Iterable[Row], seed: int = 0) -> list[Task]:
    tasks = []
    for index, row in enumerate(rows):
        tests = decode_lcb_tests(row.get("public_test_cases") or "[]")
        if row.get("private_test_cases"):
            tests = tests + decode_lcb_tests(row["private_test_cases"])
        metadata = row.get("metadata") or {}
        metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        functional = bool(tests) and tests[0].get("testtype") == "functional"
        starter = str(row.get("starter_code") or "")
        io_rule = ("Implement the method in the starter code." if functional
                   else "Read the input from standard input and write the answer to standard output.")
        prompt = str(_field(row, "question_content", "question")) + f"\n\n{io_rule}"
        if starter:
            prompt += f"\n\nStarter code:\n```python\n{starter}\n```"
        task_id = f"lcb/{row.get('question_id') or index}"
        tasks.append(Task(task_id, "code", f"{prompt}\n\n{CODE_INSTRUCTION}", "",
                          "lcb_functional" if functional else "lcb_stdin",
                          {"tests": tests, "func_name": metadata.get("func_name"), "starter_code": starter,
                           "difficulty": row.get("difficulty")}))
    return tasks


FORMATS: dict[str, Callable[..., list[Task]]] = {
    "math500": lambda rows, seed=0: math_tasks(rows, "math500", seed),
    "aime": lambda rows, seed=0: math_tasks(rows, "aime", seed),
    "gsm8k": gsm8k_tasks,
    "mmlu": mmlu_tasks,
    "gpqa": gpqa_tasks,
    "humaneval": humaneval_tasks,
    "mbpp": mbpp_tasks,
    "livecodebench": livecodebench_tasks,
}
