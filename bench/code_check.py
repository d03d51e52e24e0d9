"""What the two-process code check costs (conductor/verifiers/code_harness.py).

    .venv/bin/python bench/code_check.py          # prints a table, updates BENCHMARKS.md

Every canonical solution of the shipped HumanEval and MBPP-sanitized files, checked by the verifier (the
candidate's sandbox and the judge's, joined by a pipe pair) against the baseline of one sandbox running
the same candidate and tests as one program with a marker printed last (what the check was before the
judge moved out of the candidate's process), in the same run, one check at a time. Reported: checks per
second and the ratio; each side's pass count, which must be every solution for both.
"""

from __future__ import annotations

import argparse
import gzip
import json
import secrets
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402
from conductor.tasks.formats import preset_tasks  # noqa: E402
from conductor.tasks.task import Task  # noqa: E402
from conductor.verifiers.code_tests import verify_assert_tests, verify_humaneval  # noqa: E402
from conductor.verifiers.sandbox import SandboxLimits, run_python  # noqa: E402

LIMITS = SandboxLimits(wall_s=60, cpu_s=30)


def checks(data: Path) -> list[tuple[Task, str]]:
    """Each canonical solution's task, and the one-program baseline of its check."""
    out = []
    for task in preset_tasks([json.loads(line) for line in gzip.open(data / "humaneval.jsonl.gz", "rt")], "humaneval"):
        code = task.meta["prompt"] + task.answer
        out.append((task, f"{code}\n\n{task.meta['test']}\n\ncheck({task.meta['entry_point']})\n"))
    for task in preset_tasks(json.loads((data / "mbpp_sanitized.json").read_text()), "mbpp"):
        out.append((task, "\n".join([*task.meta["test_imports"], task.answer, *task.meta["tests"]])))
    return out


def judged(task: Task) -> bool:
    meta = task.meta
    if task.verifier == "humaneval":
        return verify_humaneval(f"```python\n{meta['prompt']}{task.answer}```", meta["prompt"], meta["test"],
                                meta["entry_point"], LIMITS).correct
    return verify_assert_tests(f"```python\n{task.answer}```", meta["tests"], meta["test_imports"], LIMITS,
                               meta["entry_point"]).correct


def one_program(program: str) -> bool:
    marker = secrets.token_hex(16)
    result = run_python(f"{program}\nprint({marker!r})\n", limits=LIMITS)
    lines = result.stdout.strip().splitlines()
    return result.ok and bool(lines) and lines[-1] == marker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args()
    cases = checks(args.data)
    started = time.perf_counter()
    baseline_passed = sum(one_program(program) for _, program in cases)
    baseline_s = time.perf_counter() - started
    started = time.perf_counter()
    judge_passed = sum(judged(task) for task, _ in cases)
    judge_s = time.perf_counter() - started
    body = "\n".join([
        "`bench/code_check.py`: every canonical solution of HumanEval (164) and MBPP-sanitized (427), one check at "
        "a time.",
        "",
        "| check | passed | checks/s |",
        "|---|---|---|",
        f"| one sandbox, candidate and tests in one program (baseline) | {baseline_passed} of {len(cases)} | "
        f"{len(cases) / baseline_s:.1f} |",
        f"| the verifier: the candidate's sandbox and the judge's | {judge_passed} of {len(cases)} | "
        f"{len(cases) / judge_s:.1f} |",
        f"| verifier / baseline throughput | | {baseline_s / judge_s:.2f} |",
        "",
        "Wall time, one check at a time, on this machine's cores. The verifier starts two sandboxed interpreters a "
        "check instead of one (side by side, so the wall time grows less than the CPU time), and every call of "
        "the candidate's function crosses a pipe as JSON: the price of a candidate that cannot judge itself "
        "(docs/architecture.md, Verification). In training and evaluation the same code against the same tests "
        "is checked once (conductor/verifiers/verdict_memo.py), which this table does not use.",
    ])
    print(body)
    if not args.no_write:
        write_section("code_check", body)
    return 0 if baseline_passed == judge_passed == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
