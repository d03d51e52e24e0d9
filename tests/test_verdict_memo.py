"""Code verdicts remembered (conductor/verifiers/verdict_memo.py): the same code against the same tests under the
same limits runs once; what the host's load decided (a timeout, a cut output) or the host itself (an
infrastructure error) runs again."""

from conductor.config import VerifierConfig
from conductor.tasks.formats import preset_tasks
from conductor.verifiers.kinds import code
from conductor.verifiers.verdict import Verdict
from conductor.verifiers.verdict_memo import VerdictMemo, settled
from conductor.verifiers.verify import verify

ROW = {"task_id": "mbpp/1", "prompt": "Write a function that doubles a number.",
       "code": "def double(x):\n    return 2 * x\n", "test_imports": [],
       "test_list": ["assert double(2) == 4", "assert double(0) == 0"]}
SETTINGS = VerifierConfig(code_timeout_s=20, require_code_isolation=True)


def test_a_settled_verdict_is_kept_and_an_unsettled_one_is_run_again():
    memo, runs = VerdictMemo(size=2), []

    def run(verdict):
        return lambda: runs.append(verdict) or verdict

    wrong, slow = Verdict(False, detail="AssertionError"), Verdict(False, detail="test 3: timeout")
    refused = Verdict(False, detail="refused", infra_error="refused")
    assert settled(wrong) and not settled(slow) and not settled(refused) and settled(Verdict(True))
    for _ in range(2):
        memo.get_or_run("wrong", run(wrong))
        memo.get_or_run("slow", run(slow))
        memo.get_or_run("refused", run(refused))
    assert runs == [wrong, slow, refused, slow, refused] and memo.hits == 1
    memo.get_or_run("a", run(Verdict(True)))
    memo.get_or_run("b", run(Verdict(True)))
    assert list(memo.verdicts) == ["a", "b"]  # at most two: the least recently used went


def test_the_same_code_is_checked_once_per_task_and_limits():
    task = preset_tasks([ROW], "mbpp")[0]
    answer = f"Here it is.\n\n```python\n{ROW['code']}```"
    before = code.MEMO.hits
    first = verify(task, answer, SETTINGS)
    again = verify(task, "Another wording, the same code.\n\n```python\n" + ROW["code"] + "```", SETTINGS)
    assert first.correct and again == first and code.MEMO.hits == before + 1
    other_limits = verify(task, answer, SETTINGS.model_copy(update={"code_timeout_s": 30}))
    assert other_limits.correct and code.MEMO.hits == before + 1
    wrong = verify(task, "```python\ndef double(x):\n    return x\n```", SETTINGS)
    assert not wrong.correct and code.MEMO.hits == before + 1
