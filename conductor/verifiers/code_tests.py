"""Code answers: run the response's code against the task's tests in the sandbox.

HumanEval (the prompt's helpers and ``check``), MBPP (every ``assert`` line, with the test imports) and
LiveCodeBench's ``functional`` tests (``Solution().<func_name>(*args)``) run as two processes
(code_harness.py): the candidate's serves calls to what it defines; the judge's runs the tests against
those calls and prints a random marker after the last, the pass. The candidate never holds the marker or
an expected value, and what it returns crosses as plain data, so it can neither print the marker nor
return an object equal to everything; exiting early (``sys.exit(0)``, ``os._exit(0)``) ends the calls,
and the judge's test fails. LiveCodeBench's ``stdin`` tests feed input and the host compares the output
line by line.
"""

from __future__ import annotations

import decimal
import json
import re
from collections.abc import Sequence
from typing import Any, Optional

from conductor.verifiers.code_harness import check, failure_detail, free_names, remote_method
from conductor.verifiers.sandbox import SandboxLimits, SandboxResult, run_python
from conductor.verifiers.verdict import Verdict

_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


def _verdict(result: SandboxResult, passed: bool, success_detail: str, failure_prefix: str = "") -> Verdict:
    """A verdict that carries the run's isolation, and its infrastructure error if the sandbox refused."""
    detail = success_detail if passed else failure_prefix + failure_detail(result)
    return Verdict(passed, None, detail, infra_error=result.infra_error, isolation=result.isolation)


def extract_code(response: str) -> str:
    """The last fenced code block (python or untagged), else the whole response."""
    blocks = _FENCE.findall(response)
    return blocks[-1] if blocks else response


def verify_humaneval(response: str, prompt: str, test: str, entry_point: str, limits: SandboxLimits) -> Verdict:
    code = extract_code(response)
    defines_entry = re.search(rf"^\s*def\s+{re.escape(entry_point)}\s*\(", code, re.MULTILINE)
    candidate = f"{prompt}\n\n{code}" if defines_entry else f"{prompt}{code}"
    tests = f"{test}\n\ncheck({entry_point})"
    return check(prompt, [entry_point, *free_names(prompt, tests)], tests, candidate, limits, "all tests passed")


def verify_assert_tests(response: str, tests: Sequence[str], imports: Sequence[str], limits: SandboxLimits,
                        entry_point: Optional[str] = None) -> Verdict:
    """``entry_point`` is the function under test, taken from the candidate even where it shadows a builtin
    (MBPP's ``sum``); no other builtin is, so a candidate cannot redefine the ``abs`` or ``len`` a test checks
    its answer with."""
    if not tests:
        return Verdict(False, None, "no tests")
    setup, test_lines = "\n".join(imports), "\n".join(tests)
    names = [*([entry_point] if entry_point else []), *free_names(setup, test_lines)]
    candidate = "\n".join([*imports, extract_code(response), ""])
    return check(setup, names, test_lines, candidate, limits, f"{len(tests)} tests passed")


_INTEGER = re.compile(r"[-+]?\d+")


def tokens_match(expected: str, actual: str) -> bool:
    """One output token against the expected one: an integer exactly (as LiveCodeBench's decimal comparison:
    "3.0" is 3, "1e18" is not 10**18 + 1), other numbers to 1e-6; "nan" and "inf" match nothing (every
    comparison with NaN is false, so a tolerance test alone let ``print("nan")`` pass any numeric answer)."""
    if expected == actual:
        return True
    try:
        wanted, got = decimal.Decimal(expected), decimal.Decimal(actual)
    except decimal.InvalidOperation:
        return False
    if not (wanted.is_finite() and got.is_finite()):
        return False
    if _INTEGER.fullmatch(expected):
        return got == wanted
    return abs(float(wanted) - float(got)) <= 1e-6


def outputs_match(expected: str, actual: str) -> bool:
    """LiveCodeBench-style comparison: line by line after stripping; tokens by ``tokens_match``."""
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
        if not all(map(tokens_match, exp_tokens, act_tokens)):
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


_FUNCTIONAL_TESTS = """
import json as _json
_cases = _json.loads({cases!r})
_solve = {solve}
for _index, (_input, _expected) in enumerate(_cases):
    _args = [_json.loads(_line) for _line in _input.split("\\n") if _line.strip()]
    _got = _solve(*_args)
    _expected = _json.loads(_expected)
    if _got != _expected and not (isinstance(_got, tuple) and list(_got) == _expected):
        raise AssertionError(f"test {{_index}}: got {{_got!r}}, expected {{_expected!r}}")
"""


def verify_functional_tests(response: str, tests: Sequence[dict[str, Any]], func_name: str, starter_code: str,
                            limits: SandboxLimits) -> Verdict:
    if not tests:
        return Verdict(False, None, "no tests")
    code = extract_code(response)
    prelude = "from typing import *\nimport collections, heapq, itertools, functools, math, bisect, string\n"
    if "class Solution" not in code and starter_code:
        code = f"{starter_code}\n{code}"
    cases = json.dumps([[case["input"], case["output"]] for case in tests])
    tests_text = _FUNCTIONAL_TESTS.format(cases=cases, solve=remote_method("Solution", func_name))
    return check("", [], tests_text, prelude + code, limits, f"{len(tests)} tests passed")
