import base64
import gzip
import json
import pickle
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest

from conductor.config import VerifierConfig
from conductor.simulator.render import own_value
from conductor.simulator.unseen import left_out
from conductor.tasks.formats import preset_tasks
from conductor.tasks.transforms import decode_lcb_tests
from conductor.verifiers.code_tests import extract_code, outputs_match
from conductor.verifiers.verify import verify

SETTINGS = VerifierConfig(code_timeout_s=5, require_code_isolation=True)
PATIENT = SETTINGS.model_copy(update={"code_timeout_s": 60})


def rejected(tasks, responses, verdicts) -> list[str]:
    """The tasks whose right answer was rejected, each rejection checked again alone with a minute to run: on
    a loaded 2-core machine a canonical solution can outrun 5 s, which is the machine, not the verifier."""
    return [t.id for t, r, v in zip(tasks, responses, verdicts) if not v.correct and not verify(t, r, PATIENT).correct]


@pytest.fixture(scope="module")
def humaneval(shared_data):
    rows = [json.loads(line) for line in gzip.open(shared_data / "humaneval.jsonl.gz", "rt")]
    return rows, preset_tasks(rows, "humaneval")


def drop_last_body_line(solution: str) -> str:
    lines = solution.rstrip().split("\n")
    return "\n".join(lines[:-1]) + "\n"


def test_all_humaneval_canonical_solutions_pass_and_truncated_ones_fail(humaneval):
    rows, tasks = humaneval
    assert len(tasks) == 164
    right = [f"```python\n{row['prompt']}{row['canonical_solution']}```" for row in rows]
    with ThreadPoolExecutor(4) as pool:
        good = list(pool.map(lambda tr: verify(tr[0], tr[1], SETTINGS), zip(tasks, right)))
        bad = list(pool.map(lambda rt: verify(rt[1], rt[0]["prompt"] + drop_last_body_line(rt[0]["canonical_solution"]),
                                              SETTINGS), zip(rows, tasks)))
    assert rejected(tasks, right, good) == []
    assert [t.id for t, v in zip(tasks, bad) if v.correct] == []


def test_humaneval_body_only_completion_and_early_exit_cheat(humaneval):
    rows, tasks = humaneval
    row, task = rows[0], tasks[0]
    assert verify(task, row["canonical_solution"], SETTINGS).correct  # body only: the prompt is prepended
    cheat = f"```python\nimport sys\ndef {row['entry_point']}(*a):\n    return None\nsys.exit(0)\n```"
    assert not verify(task, cheat, SETTINGS).correct
    os_exit = f"```python\nimport os\ndef {row['entry_point']}(*a):\n    return None\nos._exit(0)\n```"
    assert not verify(task, os_exit, SETTINGS).correct


@pytest.fixture(scope="module")
def mbpp(shared_data):
    rows = json.loads((shared_data / "mbpp_sanitized.json").read_text())
    return rows, preset_tasks(rows, "mbpp")


def block(code: str) -> str:
    return f"```python\n{code}```"


@pytest.mark.slow
def test_all_mbpp_canonical_solutions_pass_and_the_simulators_wrong_ones_fail(mbpp):
    """The simulator's gold and wrong (misnamed) MBPP answers (conductor/simulator/render.py) are what the asserts
    say: ~850 runs, 4 at a time (~1 min here). The excluded items' gold passes too, given the time it needs."""
    _, tasks = mbpp
    assert len(tasks) == 427
    left = left_out()["mbpp"]  # the paper-7 preset's unseen MBPP entry excludes these task ids
    excluded = [t for t in tasks if int(t.id.partition("/")[2]) in left]
    assert len(excluded) == len(left) > 0
    assert all(verify(t, block(own_value(t, True, 0.0)), PATIENT).correct for t in excluded)
    tasks = [t for t in tasks if t not in excluded]
    right = [block(own_value(t, True, 0.0)) for t in tasks]
    with ThreadPoolExecutor(4) as pool:
        good = list(pool.map(lambda tr: verify(tr[0], tr[1], SETTINGS), zip(tasks, right)))
        bad = list(pool.map(lambda t: verify(t, block(own_value(t, False, 0.5)), SETTINGS), tasks))
    assert rejected(tasks, right, good) == []
    assert [t.id for t, v in zip(tasks, bad) if v.correct] == []
    assert all(v.infra_error is None for v in good + bad)


def test_mbpp_runs_every_assert_with_the_test_imports_and_no_early_exit(mbpp):
    rows, tasks = mbpp
    by_id = {t.id: (row, t) for row, t in zip(rows, tasks)}
    row, task = by_id["mbpp/98"]  # its asserts call math.isclose; its code never imports math
    assert task.meta["test_imports"] == ["import math"] and "import math" not in row["code"]
    assert task.meta["entry_point"] == "multiply_num" and row["test_list"][0] in task.prompt
    assert verify(task, block(row["code"]), SETTINGS).correct
    assert verify(task, block(row["code"]), SETTINGS).detail == f"{len(row['test_list'])} tests passed"
    row, task = by_id["mbpp/2"]
    wrong_on_the_last_assert = row["code"] + f"\n_calls = 0\n_real = {task.meta['entry_point']}\n" + (
        f"def {task.meta['entry_point']}(*a):\n    global _calls\n    _calls += 1\n"
        "    return _real(*a) if _calls < 3 else ()\n")
    assert not verify(task, block(wrong_on_the_last_assert), SETTINGS).correct
    for cheat in ("import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n"):
        assert not verify(task, block(f"def {task.meta['entry_point']}(*a):\n    return None\n{cheat}"),
                          SETTINGS).correct
    assert not verify(task, "I would use sets.", SETTINGS).correct


def test_extract_code_takes_last_block():
    assert extract_code("text\n```python\nA = 1\n```\nmore\n```py\nB = 2\n```") == "B = 2\n"
    assert extract_code("def f(): pass") == "def f(): pass"


def compress(obj) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(obj)))).decode()


STDIN_ROW = {
    "question_title": "sum", "question_content": "Read two integers and print their sum.", "platform": "atcoder",
    "question_id": "abc001_a", "contest_id": "abc001", "starter_code": "", "difficulty": "easy",
    "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]),
    "private_test_cases": compress([{"input": "10 -4\n", "output": "6\n", "testtype": "stdin"}]),
    "metadata": "{}",
}
FUNCTIONAL_ROW = {
    "question_title": "two", "question_content": "Return the indices of two numbers adding to target.",
    "platform": "leetcode", "question_id": "1", "starter_code": "class Solution:\n    def twoSum(self, nums: List[int], target: int) -> List[int]:\n        ",
    "difficulty": "easy",
    "public_test_cases": json.dumps([{"input": "[2,7,11,15]\n9", "output": "[0, 1]", "testtype": "functional"}]),
    "private_test_cases": compress([{"input": "[3,2,4]\n6", "output": "[1, 2]", "testtype": "functional"}]),
    "metadata": json.dumps({"func_name": "twoSum"}),
}
TWO_SUM = """```python
class Solution:
    def twoSum(self, nums: List[int], target: int) -> List[int]:
        seen = {}
        for i, x in enumerate(nums):
            if target - x in seen:
                return [seen[target - x], i]
            seen[x] = i
```"""


def test_livecodebench_stdin_tests_public_and_private():
    task = preset_tasks([STDIN_ROW], "livecodebench")[0]
    assert task.verifier == "lcb_stdin" and len(task.meta["tests"]) == 2
    assert verify(task, "```python\na, b = map(int, input().split())\nprint(a + b)\n```", SETTINGS).correct
    wrong = verify(task, "```python\na, b = map(int, input().split())\nprint(a + b if a < 5 else 0)\n```", SETTINGS)
    assert not wrong.correct and "test 1" in wrong.detail


def test_livecodebench_functional_tests():
    task = preset_tasks([FUNCTIONAL_ROW], "livecodebench")[0]
    assert task.verifier == "lcb_functional" and task.meta["func_name"] == "twoSum"
    assert verify(task, TWO_SUM, SETTINGS).correct
    assert not verify(task, TWO_SUM.replace("return [seen[target - x], i]", "return [i, i]"), SETTINGS).correct
    assert not verify(task, "```python\nimport sys\nsys.exit(0)\n```", SETTINGS).correct


def test_malicious_pickle_in_test_cases_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return (open, (str(tmp_path / "pwned"), "w"))

    payload = base64.b64encode(zlib.compress(pickle.dumps(Exploit()))).decode()
    with pytest.raises(pickle.UnpicklingError):
        decode_lcb_tests(payload)
    assert not (tmp_path / "pwned").exists()


def test_output_comparison_is_line_and_number_tolerant():
    assert outputs_match("1 2\n3\n", "1 2  \n3")
    assert outputs_match("0.3333333", "0.33333334")
    assert not outputs_match("1 2", "1 3") and not outputs_match("1\n2", "1")
    assert outputs_match("3", "3.0") and outputs_match("1000000000000000000", "1e18")
    assert not outputs_match("1000000000000000001", "1e18")  # an integer is compared exactly, not as a float
    # NaN compares false with everything: a tolerance test alone let print("nan") pass any numeric answer
    for token in ("nan", "NaN", "-nan", "inf", "sNaN"):
        assert not outputs_match("6", token) and not outputs_match("0.5", token)
        assert not outputs_match("3\n1 5 9", f"{token}\n{token} {token} {token}")
    assert not outputs_match("x", "y") and outputs_match("Yes", "Yes")
