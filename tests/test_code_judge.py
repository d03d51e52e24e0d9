"""The code check's two processes (conductor/verifiers/code_harness.py): a candidate written against the
harness cannot pass without passing, and honest code reads the same as in one process.

The marker-from-constants, equal-to-everything and lying-int forges, the shadowed ``abs``/``len`` and the
redefined prompt helper each passed the single-process harness this replaced (checked against it, 2026-12-06)."""

import datetime
import math
import time
from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
from decimal import Decimal
from fractions import Fraction

import pytest

from conductor.verifiers.code_harness import free_names
from conductor.verifiers.code_tests import verify_assert_tests, verify_functional_tests, verify_humaneval
from conductor.verifiers.remote_calls import Opaque, decode, encode
from conductor.verifiers.sandbox import SandboxLimits

LIMITS = SandboxLimits(wall_s=20, cpu_s=10, require_isolation=True)
PROMPT = 'def add(a, b):\n    """Return a + b."""\n'
CHECK = "def check(candidate):\n    assert candidate(1, 2) == 3\n    assert candidate(5, 5) == 10\n"
RIGHT = "def add(a, b):\n    return a + b\n"

# the marker was a constant of the module the candidate ran in: found in its code object, printed at exit
MARKER_FROM_CONSTANTS = """
import sys, os, re
def _markers(frame):
    while frame:
        yield from (c for c in frame.f_code.co_consts if isinstance(c, str) and re.fullmatch("[0-9a-f]{32}", c))
        frame = frame.f_back
_found = list(_markers(sys._getframe(0)))
def _hook(*a):
    print(_found[-1] if _found else "", flush=True)
    os._exit(0)
sys.excepthook = _hook
def add(a, b):
    return 0
"""
EQUAL_TO_EVERYTHING = """
class _Any:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = object.__hash__
def add(a, b):
    return _Any()
"""
LYING_INT = """
class _Three(int):
    def __eq__(self, other): return True
    __hash__ = int.__hash__
def add(a, b):
    return _Three(0)
"""
PRINTS_A_MARKER_SHAPED_LINE = """
import atexit, secrets
atexit.register(lambda: print(secrets.token_hex(16)))
def add(a, b):
    return 0
"""


def block(code: str) -> str:
    return f"```python\n{code}```"


def test_an_honest_answer_passes_and_a_wrong_one_fails():
    assert verify_humaneval(block(RIGHT), PROMPT, CHECK, "add", LIMITS).correct
    wrong = verify_humaneval(block("def add(a, b):\n    return a - b\n"), PROMPT, CHECK, "add", LIMITS)
    assert not wrong.correct and "AssertionError" in wrong.detail


FORGES = {"marker-from-constants": MARKER_FROM_CONSTANTS, "equal-to-everything": EQUAL_TO_EVERYTHING,
          "lying-int-subclass": LYING_INT, "marker-shaped-line": PRINTS_A_MARKER_SHAPED_LINE}


@pytest.mark.parametrize("forge", FORGES.values(), ids=FORGES.keys())
def test_a_wrong_answer_written_against_the_harness_does_not_pass(forge):
    assert not verify_humaneval(block(forge), PROMPT, CHECK, "add", LIMITS).correct
    assert not verify_assert_tests(block(forge), ["assert add(1, 2) == 3"], [], LIMITS, "add").correct
    functional = forge.replace("def add(a, b):", "class Solution:\n  def add(self, a, b):")
    assert not verify_functional_tests(block(functional), [{"input": "1\n2", "output": "3"}], "add", "", LIMITS).correct


def test_a_candidate_cannot_redefine_the_builtins_the_tests_check_with():
    """``abs`` of the difference would tell the candidate the expected value; the judge keeps its own."""
    tests = ["assert abs(half(3) - 1.5) < 1e-9", "assert len(pair()) == 2"]
    shadowing = "abs = lambda x: 0\nlen = lambda x: 2\ndef half(x):\n    return 0\ndef pair():\n    return []\n"
    assert not verify_assert_tests(block(shadowing), tests, [], LIMITS, "half").correct
    honest = "def half(x):\n    return x / 2\ndef pair():\n    return (1, 2)\n"
    assert verify_assert_tests(block(honest), tests, [], LIMITS, "half").correct


def test_the_tests_call_the_datasets_helpers_not_the_candidates():
    """HumanEval/50's ``check`` encodes with the prompt's ``encode_shift``: a candidate that redefines it as the
    identity, and answers with the identity, agreed with itself in one process."""
    prompt = ('def encode_shift(s: str):\n    return "".join(chr((ord(c) + 5 - 97) % 26 + 97) for c in s)\n\n\n'
              'def decode_shift(s: str):\n    """Decode encode_shift."""\n')
    check = "def check(candidate):\n    for s in ('abc', 'xyz'):\n        assert candidate(encode_shift(s)) == s\n"
    identity = "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return s\n"
    assert not verify_humaneval(block(identity), prompt, check, "decode_shift", LIMITS).correct
    right = 'def decode_shift(s):\n    return "".join(chr((ord(c) - 5 - 97) % 26 + 97) for c in s)\n'
    assert verify_humaneval(block(right), prompt, check, "decode_shift", LIMITS).correct


def test_a_module_the_candidate_imported_reaches_the_tests_only_from_the_standard_library():
    """MBPP's asserts may use a module only the candidate imported; the judge imports its own copy, and
    never a module a candidate names that is not the standard library's (its import could change the judge)."""
    code = "import math\ndef root(x):\n    return math.sqrt(x)\n"
    assert verify_assert_tests(block(code), ["assert math.isclose(root(2), 2 ** 0.5)"], [], LIMITS, "root").correct
    renamed = "import types\nmath = types.ModuleType('conductor')\ndef root(x):\n    return 0\n"
    named = verify_assert_tests(block(renamed), ["assert math.isclose(root(2), 2 ** 0.5)"], [], LIMITS, "root")
    assert not named.correct and "NameError" in named.detail


def test_the_function_under_test_may_shadow_a_builtin():
    """MBPP/126 asks for a function named ``sum``: the entry point is the candidate's whatever its name."""
    code = "def sum(a, b):\n    return a * b\n"
    assert verify_assert_tests(block(code), ["assert sum(3, 4) == 12"], [], LIMITS, "sum").correct
    assert not verify_assert_tests(block(code), ["assert sum(3, 4) == 7"], [], LIMITS, "sum").correct


def test_what_honest_code_returns_reads_as_it_would_in_one_process():
    code = """
import re
def evens(n):
    return (i for i in range(n) if i % 2 == 0)
def found(text):
    return re.search("ab+", text)
def parse(text):
    if not text:
        raise ValueError("empty")
    return {"n": int(text), "tags": {"a", "b"}, "pair": (1, 2.5), "raw": b"x"}
def SIZE():
    return 3
LIMIT = 10
"""
    tests = ["assert list(evens(5)) == [0, 2, 4]", "assert found('xabbb')", "assert not found('xyz')",
             "assert parse('7') == {'n': 7, 'tags': {'b', 'a'}, 'pair': (1, 2.5), 'raw': b'x'}",
             "assert isinstance(parse('1')['pair'], tuple)", "assert LIMIT == 10 and SIZE() == 3",
             "try:\n    parse('')\n    raise AssertionError('no error')\n"
             "except ValueError as e:\n    assert 'empty' in str(e)"]
    verdict = verify_assert_tests(block(code), tests, [], LIMITS, "evens")
    assert verdict.correct, verdict.detail


def test_exceptions_cross_as_their_nearest_builtin_with_their_arguments():
    code = """
import json
class BadInput(ValueError):
    pass
def parse(text):
    if text == "bad":
        raise BadInput("bad input")
    if text == "key":
        raise KeyError("k")
    if text == "bytes":
        b"\\xff".decode("utf-8")
    return json.loads(text)
def depth(n):
    return 0 if n == 0 else 1 + depth(n - 1)
HERE = __file__
"""
    raises = "try:\n    parse({!r})\n    raise AssertionError\nexcept {} as e:\n    assert {}"
    tests = [raises.format("bad", "ValueError", "str(e) == 'bad input'"), raises.format("{", "ValueError", "e"),
             raises.format("key", "KeyError", "e.args[0] == 'k'"),
             raises.format("bytes", "UnicodeDecodeError", "e.start == 0"), "assert depth(990) == 990", "assert HERE"]
    verdict = verify_assert_tests(block(code), tests, [], LIMITS, "parse")
    assert verdict.correct, verdict.detail


def test_early_exits_and_load_failures_fail_with_the_candidates_reason():
    for cheat in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        assert not verify_humaneval(block(RIGHT.replace("return", cheat + "    return")), PROMPT, CHECK, "add",
                                    LIMITS).correct
        assert not verify_humaneval(block(cheat + RIGHT), PROMPT, CHECK, "add", LIMITS).correct
    broken = verify_humaneval(block("def add(a, b)\n    return a + b\n"), PROMPT, CHECK, "add", LIMITS)
    assert not broken.correct and "SyntaxError" in broken.detail
    noisy = ("import sys, threading, time\nprint('a warning', file=sys.stderr)\n"
             "threading.Thread(target=time.sleep, args=(600,)).start()\ndef add(a, b):\n    return 0\n")
    wrong = verify_humaneval(block(noisy), PROMPT, CHECK, "add", LIMITS)
    assert not wrong.correct and "AssertionError" in wrong.detail  # the test's failure, not the stopped candidate's


def test_a_hanging_or_flooding_candidate_fails_within_the_wall_limit():
    quick = SandboxLimits(wall_s=5, cpu_s=5, require_isolation=True)
    hangs = verify_humaneval(block("def add(a, b):\n    while True:\n        pass\n"), PROMPT, CHECK, "add", quick)
    assert not hangs.correct and hangs.detail == "timeout"
    floods = verify_humaneval(block("def add(a, b):\n    return 'x' * (80 << 20)\n"), PROMPT, CHECK, "add", quick)
    assert not floods.correct


def test_a_candidate_that_outlives_the_judge_is_stopped_with_it():
    """A thread that never ends would hold the candidate's process, and the check, to the wall limit."""
    lingering = "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n" + RIGHT
    started = time.monotonic()
    verdict = verify_humaneval(block(lingering), PROMPT, CHECK, "add", SandboxLimits(wall_s=120, cpu_s=10,
                                                                                    require_isolation=True))
    assert verdict.correct, verdict.detail
    assert time.monotonic() - started < 60  # not the wall limit (120 s)


def test_values_cross_as_exact_builtins():
    class Lying(str):
        def __eq__(self, other):
            return True

        __hash__ = str.__hash__

    values = [None, True, 0, -(2 ** 100), 1.5, math.inf, 3 + 4j, "é\x00", b"\xff", bytearray(b"a"), [1, (2, {3})],
              frozenset({1}), {"k": [None]}, range(1, 9, 2), Decimal("0.3"), Fraction(1, 3), deque([1]),
              Counter("abb"), OrderedDict(b=1, a=2), datetime.datetime(2026, 12, 6, 15, 30), datetime.date(2026, 1, 2),
              datetime.time(1, 2), datetime.timedelta(days=1, seconds=3)]
    for value in values:
        assert decode(encode(value)) == value and type(decode(encode(value))) is type(value)
    assert math.isnan(decode(encode(math.nan)))
    assert decode(encode(memoryview(b"ab"))) == b"ab" and decode(encode(2 ** 60)) == 2 ** 60
    counts = decode(encode(defaultdict(int, a=1)))
    assert type(counts) is defaultdict and counts["b"] == 0 and counts["a"] == 1
    point = decode(encode(namedtuple("Point", "x y")(1, 2)))
    assert point == (1, 2) and point.y == 2 and type(point).__name__ == "Point"
    assert type(decode(encode(Lying("a")))) is str and decode(encode(Lying("a"))) != "b"
    assert list(decode(encode(iter([1, 2])))) == [1, 2]
    opaque = decode(encode(object()))
    assert isinstance(opaque, Opaque) and opaque != opaque.text and bool(opaque)
    with pytest.raises(TypeError):
        encode(lambda: 0)
    for bad in (["int"], ["code", "x"], {"value": 1}, ["list", "x"], ["dict", [[1]]], ["opaque", 1, "x"], 1.5,
                ["defaultdict", "exec", []]):
        with pytest.raises(ValueError):
            decode(bad)


def test_tests_that_do_not_parse_are_a_failed_check_naming_the_error():
    verdict = verify_assert_tests(block(RIGHT), ["assert add(1, 2) == 3 +"], [], LIMITS, "add")
    assert not verdict.correct and "SyntaxError" in verdict.detail


def test_the_names_a_candidate_is_to_define_are_the_tests_free_names():
    setup = "import math\nfrom os import path as p\n"
    tests = "assert f(1) == g[0]\nx = 2\nassert math.isclose(h(x), 1)\nassert p.sep\nassert [y for y in k(x)]"
    assert free_names(setup, tests) == ["f", "g", "h", "k"]
