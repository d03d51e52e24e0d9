"""The built-in dataset formats, each a named preset of the one field-map path (conductor/tasks/field_map.py):
a field map, plus a transform (conductor/tasks/transforms.py) where the row needs logic a map cannot say.

MATH-500 / AIME (problem, answer), GSM8K (question, answer ending in ``#### N``), MMLU (question, choices,
answer index), GPQA CSV (Question, Correct Answer, Incorrect Answer 1-3), HumanEval (task_id, prompt,
test, entry_point), MBPP sanitized (task_id, prompt, code, test_imports, test_list of asserts) and
LiveCodeBench (question_content, starter_code, public/private test cases, metadata with func_name).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any, Optional

from conductor.tasks import transforms
from conductor.tasks.field_map import FieldMap, RowFormatError, tasks_from_rows
from conductor.tasks.task import Task

__all__ = ["PRESETS", "RowFormatError", "preset_tasks"]


def _math(domain: str) -> FieldMap:
    return FieldMap("math", question=("problem", "question"), answer=("answer",), id=("unique_id", "id"),
                    domain_value=domain, meta=(("subject", ("subject",)), ("level", ("level",))),
                    optional=frozenset({"id", "subject", "level"}))


PRESETS: dict[str, FieldMap] = {
    "math500": _math("math500"),
    "aime": _math("aime"),
    "gsm8k": FieldMap("number", question=("question",), answer=("answer",), id=("idx",), domain_value="gsm8k",
                      optional=frozenset({"id"}), transform=transforms.gsm8k_gold),
    # ids are "{domain}/{row index}" and the options are shuffled per id, so the domain is part of the order
    "mmlu": FieldMap("choice", question=("question",), domain_value="mmlu", meta=(("subject", ("type", "subject")),),
                     optional=frozenset({"subject"}), transform=transforms.mmlu_options),
    "gpqa": FieldMap("choice", question=("Question",), id=("Record ID",), domain_value="gpqa",
                     meta=(("subject", ("Subdomain",)),), optional=frozenset({"id", "subject"}),
                     transform=transforms.gpqa_options),
    "humaneval": FieldMap("humaneval", template="Complete this Python function.\n\n```python\n{prompt}```",
                          answer=("canonical_solution",), id=("task_id",), id_prefix="", domain_value="code",
                          meta=(("prompt", ("prompt",)), ("test", ("test",)), ("entry_point", ("entry_point",))),
                          optional=frozenset({"answer"})),
    "mbpp": FieldMap("mbpp", question=("prompt",), answer=("code",), id=("task_id",), domain_value="mbpp",
                     transform=transforms.mbpp_tests),
    "livecodebench": FieldMap("lcb_stdin", question=("question_content", "question"), id=("question_id",),
                              id_prefix="lcb/", domain_value="code", meta=(("difficulty", ("difficulty",)),),
                              optional=frozenset({"id", "difficulty"}), transform=transforms.lcb_tests),
}


def preset_tasks(rows: Iterable[Any], name: str, seed: int = 0, domain: Optional[str] = None,
                 source: str = "<rows>") -> list[Task]:
    """Rows already read, mapped by a built-in preset; ``domain`` renames the preset's constant domain (and so
    its id prefix, and MMLU's option order), as the simulator does for its 'physchem' MMLU subset."""
    fields = PRESETS[name] if domain is None else replace(PRESETS[name], domain_value=domain)
    return tasks_from_rows(rows, fields, seed, source)
