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
def _load_channel() -> str:
    """Program text that makes ``_conductor_calls`` (remote_calls.py, from its embedded source) a module of its
    own, so the program's other names cannot shadow its functions. Read once per process."""
    source = Path(__file__).with_name("remote_calls.py").read_text(encoding="utf-8")
    return (f"import types as _conductor_types\n"
            f"{_CHANNEL_MODULE} = _conductor_types.ModuleType('remote_calls')\n"
            f"exec(compile({source!r}, 'remote_calls.py', 'exec'), {_CHANNEL_MODULE}.__dict__)\n")


def check(setup: str, names: Sequence[str], tests: str, candidate: str, limits: SandboxLimits,
          passed_detail: str) -> Verdict:
    """Run ``candidate`` (source, as ``__main__``) in one sandbox and, in another, the judge: ``setup`` (the
    dataset's own definitions and imports), each of ``names`` bound to what the candidate defines, ``tests``,
    then a random marker. A pass is the judge's clean exit with the marker as its last line."""
    marker = secrets.token_hex(16)
    judge = (f"{setup}\n\n{_load_channel()}{_CHANNEL_MODULE}.connect(__channel__)\n"
             f"{_CHANNEL_MODULE}.bind({list(names)!r}, globals())\n\n{tests}\n\nprint({marker!r})\n")
    judge_result, candidate_result = run_python_pair(judge, _candidate_program(candidate), limits)
    infra_error = judge_result.infra_error or candidate_result.infra_error
    lines = judge_result.stdout.strip().splitlines()
    passed = judge_result.ok and not infra_error and bool(lines) and lines[-1].strip() == marker
    detail = passed_detail if passed else _failure(judge_result, candidate_result)
    return Verdict(passed, None, detail, infra_error=infra_error, isolation=candidate_result.isolation)


def _candidate_program(source: str) -> str:
    """The candidate's process: run ``source`` as ``__main__`` in a namespace of its own, then serve it."""
    return (_load_channel()
            + "import sys as _conductor_sys\n"  # the frames this program adds under the candidate's own
            + "_conductor_sys.setrecursionlimit(_conductor_sys.getrecursionlimit() + 8)\n"
            + "_conductor_namespace = {'__name__': '__main__', '__file__': 'solution.py',"
            + " '__builtins__': __builtins__}\n"
            + f"exec(compile({source!r}, 'solution.py', 'exec'), _conductor_namespace)\n"
            + f"{_CHANNEL_MODULE}.serve(_conductor_namespace, __channel__)\n")


def remote_method(class_name: str, method: str) -> str:
    """Judge-side text: a call of ``method`` on a new instance of the candidate's ``class_name``."""
    return f"{_CHANNEL_MODULE}.Remote({class_name!r}, method={method!r})"


def free_names(*sources: str) -> list[str]:
    """Names the judge's code reads but neither defines, imports nor finds among the builtins: the ones the
    candidate is to define (the function under test, and anything else the tests take from it)."""
    read: list[str] = []
    bound: set[str] = set(dir(builtins))
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue  # the judge's run fails on it, naming the error
        for node in ast.walk(tree):
            if isinstance(node, ast.Name):
                (read.append if isinstance(node.ctx, ast.Load) else bound.add)(node.id)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(node.name)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
            elif isinstance(node, ast.arg):
                bound.add(node.arg)
    return list(dict.fromkeys(name for name in read if name not in bound))


def _failure(judge: SandboxResult, candidate: SandboxResult) -> str:
    """Why the pair failed: the judge's run, unless the candidate's ended it (refused, out of time or output,
    or failed to load or died first: its own error says why). A candidate stopped after the judge was done
    said nothing that matters."""
    ended_first = CANDIDATE_ENDED in judge.stderr and bool(candidate.stderr.strip())
    candidate_failed = candidate.infra_error or candidate.timed_out or candidate.output_truncated or ended_first
    return failure_detail(candidate if candidate_failed and not judge.infra_error else judge)


def failure_detail(result: SandboxResult) -> str:
    """Why one sandboxed run failed, in a line."""
    if result.infra_error:
        return result.infra_error
    if result.timed_out:
        return TIMED_OUT
    if result.output_truncated:
        return OVER_OUTPUT_CAP
    tail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
    return tail[0][:300]
