"""The two programs of a code check, and its verdict: the candidate's process runs the answer and serves
calls to it; the judge's process runs the dataset's tests against those calls and alone holds the pass
marker (remote_calls.py says what crosses between them, sandbox.py ``run_python_pair`` runs them).

Why two: in one process a candidate written against the harness could read the marker from the module's
constants and print it at exit, or return an object equal to everything, and pass without passing. Here
the candidate's process never holds the tests' expected values or the marker, and the judge compares plain
values it built itself; the candidate can only answer the calls it is sent.
"""

from __future__ import annotations

import ast
import builtins
import functools
import secrets
from collections.abc import Sequence
from pathlib import Path

from conductor.verifiers.remote_calls import CANDIDATE_ENDED
from conductor.verifiers.sandbox import SandboxLimits, SandboxResult, run_python_pair
from conductor.verifiers.verdict import Verdict

_CHANNEL_MODULE = "_conductor_calls"
TIMED_OUT, OVER_OUTPUT_CAP = "timeout", "output over the sandbox's cap"  # failures the host's load decides


@functools.cache
def _remote_calls_source() -> str:
    return Path(__file__).with_name("remote_calls.py").read_text(encoding="utf-8")


def _load_channel() -> str:
    """Program text that makes ``_conductor_calls`` (remote_calls.py, from its embedded source) a module of its
    own, so the program's other names cannot shadow its functions."""
    return (f"import types as _conductor_types\n"
            f"{_CHANNEL_MODULE} = _conductor_types.ModuleType('remote_calls')\n"
            f"exec(compile({_remote_calls_source()!r}, 'remote_calls.py', 'exec'), {_CHANNEL_MODULE}.__dict__)\n")


def candidate_program(source: str) -> str:
    """The candidate's process: run ``source`` as ``__main__`` in a namespace of its own, then serve it."""
    return (_load_channel()
            + "import sys as _conductor_sys\n"  # the frames this program adds under the candidate's own
            + "_conductor_sys.setrecursionlimit(_conductor_sys.getrecursionlimit() + 8)\n"
            + "_conductor_namespace = {'__name__': '__main__', '__file__': 'solution.py',"
            + " '__builtins__': __builtins__}\n"
            + f"exec(compile({source!r}, 'solution.py', 'exec'), _conductor_namespace)\n"
            + f"{_CHANNEL_MODULE}.serve(_conductor_namespace, __channel__)\n")


def judge_program(setup: str, names: Sequence[str], tests: str, marker: str) -> str:
    """The judge's process: ``setup`` (the dataset's own definitions and imports), then each of ``names`` bound
    to what the candidate defines, then ``tests``, then the marker, printed only if every test held."""
    return (f"{setup}\n\n{_load_channel()}{_CHANNEL_MODULE}.connect(__channel__)\n"
            f"{_CHANNEL_MODULE}.bind({list(names)!r}, globals())\n\n{tests}\n\nprint({marker!r})\n")


def remote_method(class_name: str, method: str) -> str:
    """Judge-side text: a call of ``method`` on a new instance of the candidate's ``class_name``."""
    return f"{_CHANNEL_MODULE}.Remote({class_name!r}, method={method!r})"


def free_names(*sources: str) -> list[str]:
    """Names the judge's code reads but neither defines, imports nor finds among the builtins: the ones the
    candidate is to define (the function under test, and anything else the tests take from it)."""
    read: list[str] = []
    bound: set[str] = set(dir(builtins))
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Name):
                (read.append if isinstance(node.ctx, ast.Load) else bound.add)(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
    return list(dict.fromkeys(name for name in read if name not in bound))


def judged(judge: str, candidate: str, limits: SandboxLimits, marker: str, passed_detail: str) -> Verdict:
    """Run the pair and read the verdict: a pass is the judge's clean exit with the marker as its last line."""
    judge_result, candidate_result = run_python_pair(judge, candidate, limits)
    infra_error = judge_result.infra_error or candidate_result.infra_error
    lines = judge_result.stdout.strip().splitlines()
    passed = judge_result.ok and not infra_error and bool(lines) and lines[-1].strip() == marker
    detail = passed_detail if passed else _failure(judge_result, candidate_result)
    return Verdict(passed, None, detail, infra_error=infra_error, isolation=candidate_result.isolation)


def new_marker() -> str:
    return secrets.token_hex(16)


def _failure(judge: SandboxResult, candidate: SandboxResult) -> str:
    """Why it failed: the sandbox, the clock, the candidate's own error (it failed to load, or died), or
    the test's (a candidate stopped after the judge was done said nothing that matters)."""
    for result in (judge, candidate):
        if result.infra_error:
            return result.infra_error
    if judge.timed_out or candidate.timed_out:
        return TIMED_OUT
    if candidate.output_truncated or judge.output_truncated:
        return OVER_OUTPUT_CAP
    judge_said = (judge.stderr.strip().splitlines() or [f"exit code {judge.returncode}"])[-1]
    candidate_said = candidate.stderr.strip().splitlines()[-1:]
    if CANDIDATE_ENDED in judge_said and candidate_said:  # it failed to load, or died: its own error says why
        return candidate_said[0][:300]
    return judge_said[:300]
