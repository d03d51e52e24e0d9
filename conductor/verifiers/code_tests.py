"""Code answers: run the response's code against the task's tests in the sandbox.

HumanEval: program = prompt (its imports and stub) + the candidate + the dataset's ``check`` function.
MBPP: program = the test imports + the candidate + every ``assert`` line (no stub, no entry point: the
candidate is a whole module).
LiveCodeBench: ``stdin`` tests feed input and compare output line by line; ``functional`` tests call
``Solution().<func_name>(*args)``. A pass needs a random marker printed *after* the tests, so a candidate
that exits early (``sys.exit(0)``, ``os._exit(0)``) cannot pass by skipping them. The tests run in the
candidate's own interpreter, so a candidate written against this harness can still forge a pass (read the
marker from its module's constants and print it at exit; or return an object equal to everything): the
sandbox contains what it does, and the verdict holds for code not written to fool it.
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Sequence
from typing import Any

from conductor.verifiers.sandbox import SandboxLimits, SandboxResult, run_python
from conductor.verifiers.verdict import Verdict

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _verdict(result: SandboxResult, passed: bool, success_detail: str, failure_prefix: str = "") -> Verdict:
    """A verdict that carries the run's isolation, and its infrastructure error if the sandbox refused."""
    detail = success_detail if passed else failure_prefix + _failure_detail(result)
    return Verdict(passed, None, detail, infra_error=result.infra_error, isolation=result.isolation)


def extract_code(response: str) -> str:
    """The last fenced code block (python or untagged), else the whole response."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def _passed(result: SandboxResult, marker: str) -> bool:
    lines = result.stdout.strip().splitlines()
    return result.ok and bool(lines) and lines[-1].strip() == marker


def _failure_detail(result: SandboxResult) -> str:
    if result.infra_error:
        return result.infra_error
    if result.timed_out:
        return "timeout"
    if result.output_truncated:
        return "output over the sandbox's cap"
    tail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
    return tail[0][:300]


def verify_humaneval(response: str, prompt: str, test: str, entry_point: str, limits: SandboxLimits) -> Verdict:
    code = extract_code(response)
    defines_entry = re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE)
    program = f"{prompt}\n\n{code}" if defines_entry else f"{prompt}{code}"
    marker = secrets.token_hex(16)
    program += f"\n\n{test}\n\ncheck({entry_point})\nprint({marker!r})\n"
    result = run_python(program, limits=limits)
    return _verdict(result, _passed(result, marker), "all tests passed")


def verify_assert_tests(response: str, tests: Sequence[str], imports: Sequence[str], limits: SandboxLimits) -> Verdict:
    if not tests:
        return Verdict(False, None, "no tests")
    marker = secrets.token_hex(16)
    program = "\n".join([*imports, extract_code(response), "", *tests, f"print({marker!r})", ""])
    result = run_python(program, limits=limits)
    return _verdict(result, _passed(result, marker), f"{len(tests)} tests passed")


def outputs_match(expected: str, actual: str) -> bool:
    """LiveCodeBench-style comparison: line by line after stripping; numbers compared to 1e-6."""
    exp_lines = [line.strip() for line in expected.strip().splitlines()]
    act_lines = [line.strip() for line in actual.strip().splitlines()]
    if exp_lines == act_lines:
        return True
    if len(exp_lines) != len(act_lines):
        return False
    for exp, act in zip(exp_lines, act_lines):
        exp_tokens, act_tokens = exp.split(), act.split()
        if len(exp_tokens) != len(act_tokens):
            return False
        for e, a in zip(exp_tokens, act_tokens):
            if e == a:
                continue
            try:
                if abs(float(e) - float(a)) > 1e-6:
                    return False
            except ValueError:
                return False
    return True


def verify_stdin_tests(response: str, tests: Sequence[dict[str, Any]], limits: SandboxLimits) -> Verdict:
    code = extract_code(response)
    if not tests:
        return Verdict(False, None, "no tests")
    for index, case in enumerate(tests):
        result = run_python(code, stdin=case["input"], limits=limits)
        if not result.ok:
            return _verdict(result, False, "", f"test {index}: ")
        if not outputs_match(case["output"], result.stdout):
            return Verdict(False, None, f"test {index}: wrong output", isolation=result.isolation)
    return _verdict(result, True, f"{len(tests)} tests passed")


_FUNCTIONAL_HARNESS = """

import json as _json
_cases = _json.loads({cases!r})
for _index, (_input, _expected) in enumerate(_cases):
    _args = [_json.loads(_line) for _line in _input.split("\\n") if _line.strip()]
    _got = getattr(Solution(), {func_name!r})(*_args)
    _expected = _json.loads(_expected)
    if _got != _expected and not (isinstance(_got, tuple) and list(_got) == _expected):
        raise AssertionError(f"test {{_index}}: got {{_got!r}}, expected {{_expected!r}}")
print({marker!r})
"""


def verify_functional_tests(response: str, tests: Sequence[dict[str, Any]], func_name: str, starter_code: str,
                            limits: SandboxLimits) -> Verdict:
    code = extract_code(response)
    prelude = "from typing import *\nimport collections, heapq, itertools, functools, math, bisect, string\n"
    if "class Solution" not in code and starter_code:
        code = f"{starter_code}\n{code}"
    marker = secrets.token_hex(16)
    cases = json.dumps([[case["input"], case["output"]] for case in tests])
    program = prelude + code + _FUNCTIONAL_HARNESS.format(cases=cases, func_name=func_name, marker=marker)
    result = run_python(program, limits=limits)
    return _verdict(result, bool(tests) and _passed(result, marker), f"{len(tests)} tests passed")
