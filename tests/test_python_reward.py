"""A user's own reward (``verifier: python``, ``reward_function: module:function``): imported from a module
outside the package at config load, where a bad one fails naming the setting; called with a read-only view
of the task; a score in [0, 1] interpolated into the reward; anything else an infrastructure error in
training's records and evaluation's outcomes alike; worded by the simulator as a text answer."""

import asyncio
import dataclasses
import json
import re
import sys
import time
import uuid

import pytest
import yaml

from conductor.baselines import FixedRouter
from conductor.config import Config, PoolConfig, WorkerSpec
from conductor.config_loader import ConfigError, load_config
from conductor.episode import EpisodeResult
from conductor.episode_score import EpisodeScorer, Status, score_of
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.registry import build_methods
from conductor.evaluation.report import AVERAGE, summarise
from conductor.executor import WorkflowExecutor
from conductor.per_process import PerProcess
from conductor.rewards import RewardConfig
from conductor.rollout import RolloutRunner
from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import summarise as rollout_stats
from conductor.roster import Roster
from conductor.scripted_pool import ScriptedPool
from conductor.simulator.presets import SimWorker
from conductor.simulator.render import own_value, render_answer
from conductor.tasks import load_tasks
from conductor.token_budget import TokenBudget
from conductor.trace import RoundTrace, StepTrace
from conductor.verifiers import python_reward
from conductor.verifiers.verify import verify
from conductor.workflow import ParseFailure
from tests.test_episode_score import FakeTokenizer

REWARDS = '''
import math
import threading

SEEN = []
RELEASE = threading.Event()


def share(task, response):
    """The share of the reference's words the response holds: a graded verdict."""
    SEEN.append((task, response))
    words = task["answer"].split()
    return sum(word in response for word in words) / len(words)


def last_line(task, response):
    return response.strip().splitlines()[-1] == "Answer: " + task["answer"]


def raises(task, response):
    raise RuntimeError("judge down; request was " + "x" * 1000)


def nan(task, response):
    return math.nan


def too_big(task, response):
    return 1.5


def negative(task, response):
    return -0.1


def past_any_float(task, response):
    return 10**400


async def awaited(task, response):
    return 1.0


def words(task, response):
    return "yes"


def cannot_judge(task, response):
    return None


def hashes(task, response):
    return response.strip().endswith("#### " + task["answer"])


def sleeps(task, response):
    """Hangs (a judge that never answers) until the test releases it."""
    RELEASE.wait(timeout=300)
    return 1.0


def numpy_mean(task, response):
    import numpy

    return numpy.mean([word in response for word in task["answer"].split()])


def one_argument(task):
    return 1.0


def three_arguments(task, response, reference):
    return 1.0


def optional_third(task, response, weight=1.0):
    return 1.0


class Judge:
    @staticmethod
    def score(task, response):
        return 1.0


NOT_A_FUNCTION = 3
'''

ROWS = [{"q": "Name two primary colours.", "a": "red blue", "n": 1, "topic": "art"},
        {"q": "Name a warm colour.", "a": "orange", "n": 2, "topic": "art"}]


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A reward module, unique per test, in a folder on sys.path (as the working dir is under ``python -m``)."""
    name = f"user_rewards_{uuid.uuid4().hex[:8]}"
    code = tmp_path / "user_code"
    code.mkdir()
    (code / f"{name}.py").write_text(REWARDS)
    (code / f"{name}_broken.py").write_text("import a_dependency_nobody_installed\n")
    monkeypatch.syspath_prepend(str(code))
    monkeypatch.setattr(python_reward, "_functions", PerProcess())
    yield name
    for module in (name, f"{name}_broken"):
        sys.modules.pop(module, None)


def entry(tmp_path, function: str, **extra) -> dict:
    path = tmp_path / "colours.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return {"path": str(path), "fields": {"question": "q", "answer": "a", "id": "n"}, "domain": "colours",
            "verifier": "python", "reward_function": function, "meta": ["topic"], **extra}


def config_with(tmp_path, dataset: dict, overrides=()) -> Config:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"data": {"datasets": [dataset]}}))
    return load_config(path, overrides)


def test_the_users_function_scores_the_datasets_answers_with_a_read_only_view(tmp_path, user_module):
    [spec] = config_with(tmp_path, entry(tmp_path, f"{user_module}:share")).data.datasets
    first, second = load_tasks(spec)
    assert (first.verifier, first.reward_function) == ("python", f"{user_module}:share")
    assert first.prompt == "Name two primary colours.\n\nEnd the response with 'Answer: ' followed by the answer."

    verdict = verify(first, "Answer: red and blue")
    assert verdict.score == 1.0 and verdict.correct and verdict.extracted == "red and blue"
    half = verify(first, "Answer: red")
    assert half.score == 0.5 and half.correct  # 0.5 counts as correct for accuracy
    assert verify(second, "Answer: teal").score == 0.0 and not verify(second, "Answer: teal").correct

    task, response = sys.modules[user_module].SEEN[0]
    assert dict(task) == {"id": "colours/1", "domain": "colours", "question": first.prompt, "answer": "red blue",
                          "meta": {"topic": "art"}}
    assert response == "Answer: red and blue"
    with pytest.raises(TypeError):
        task["meta"]["topic"] = "changed"
    assert first.meta == {"topic": "art"}


@pytest.mark.parametrize("function, overrides, message", [
    ("{m}_missing:score", (), r"data\.datasets\.0\.reward_function: .*cannot import '\w+_missing': "
     r"ModuleNotFoundError: No module named '\w+_missing'"),
    ("{m}_broken:score", (), r"data\.datasets\.0\.reward_function: .*cannot import '\w+_broken': "
     r"ModuleNotFoundError: No module named 'a_dependency_nobody_installed'"),
    ("{m}:scor", (), r"data\.datasets\.0\.reward_function: .*module '\w+' has no 'scor'"),
    ("{m}:one_argument", (), r"data\.datasets\.0\.reward_function: .*cannot be called as f\(task, response\): "
     r"too many positional arguments"),
    ("{m}:three_arguments", (), r"data\.datasets\.0\.reward_function: .*cannot be called as f\(task, response\): "
     r"missing a required argument: 'reference'"),
    ("{m}:NOT_A_FUNCTION", (), r"data\.datasets\.0\.reward_function: .*is not callable \(it is of type int\)"),
    ("{m}:awaited", (), r"data\.datasets\.0\.reward_function: .*is async: a reward function is called in a thread"),
    ("{m}.share", (), r"data\.datasets\.0\.reward_function: .*is not 'module:function'"),
    ("{m}:share", ("data.datasets.0.reward_function={m}:nothing_here",),
     r"data\.datasets\.0\.reward_function: .*has no 'nothing_here'"),  # a dotted override is checked alike
    ("{m}:share", ("data.datasets.0.verifier=text",), r"reward_function is for verifier python; verifier text"),
    (None, (), r"verifier python needs reward_function: 'module:function'"),
])
def test_a_reward_that_cannot_be_used_fails_at_config_load_naming_the_setting(tmp_path, user_module, function,
                                                                                overrides, message):
    dataset = entry(tmp_path, function and function.format(m=user_module))
    if function is None:
        dataset.pop("reward_function")
    with pytest.raises(ConfigError, match=message):
        config_with(tmp_path, dataset, [o.format(m=user_module) for o in overrides])


@pytest.mark.parametrize("function, score", [("optional_third", 1.0), ("Judge.score", 1.0), ("numpy_mean", 0.5)])
def test_a_default_argument_a_static_method_and_a_numpy_scalar_are_accepted(tmp_path, user_module, function, score):
    [spec] = config_with(tmp_path, entry(tmp_path, f"{user_module}:{function}")).data.datasets
    verdict = verify(load_tasks(spec)[0], "Answer: red")
    assert verdict.score == score and type(verdict.score) is float


def episode(answer="Answer: red", cost=0.0):
    step = StepTrace(round=0, index=0, shown_worker=0, worker_id="w", subtask="s", access=(), visible=(),
                     response=answer, tokens_in=30, tokens_out=20, cost_usd=cost)
    return EpisodeResult([RoundTrace(0, "text", steps=[step])], answer=answer)


@pytest.mark.parametrize("function, reason", [
    ("raises", r"raised RuntimeError: judge down; request was x+\.\.\.$"),
    ("nan", r"returned NaN$"),
    ("too_big", r"returned 1\.5, outside \[0, 1\]$"),
    ("negative", r"returned -0\.1, outside \[0, 1\]$"),
    ("past_any_float", r"returned a number outside \[0, 1\]$"),
    ("words", r"returned a str, not a number in \[0, 1\]$"),
    ("cannot_judge", r"returned None \(cannot judge\)$"),
])
def test_a_reward_that_raises_or_returns_no_score_is_an_infra_error_in_training_and_evaluation(
        tmp_path, user_module, function, reason):
    config = config_with(tmp_path, entry(tmp_path, f"{user_module}:{function}"))
    task = load_tasks(config.data.datasets[0])[0]
    prefix = rf"^verifier: reward function {user_module}:{function} "

    verdict = verify(task, "Answer: red")
    assert verdict.infra_error is not None and verdict.score is None and not verdict.correct
    scored = score_of(episode(), verdict)
    assert scored.status is Status.INFRA_ERROR and scored.reward is None and scored.judged is None
    assert scored.infra_error is not None
    assert len(scored.infra_error) < 300  # the user's message is cut, not logged whole

    workers = [WorkerSpec(id="w", description="answers")]
    pool = ScriptedPool({"w": "Answer: red"})
    config = Config(data=config.data, pool=PoolConfig(workers=workers), prompt={"num_fewshot": 0})
    [record] = asyncio.run(RolloutRunner(config, FakeTokenizer(), FixedRouter(lambda: 0), pool).run(
        [task], group_size=1))
    assert record.reward is None and record.correct is False and record.score is None
    assert record.infra_error is not None and re.search(prefix + reason, record.infra_error)

    context = MethodContext(Roster.full(workers), WorkflowExecutor(pool))
    [outcome] = asyncio.run(Harness().run(build_methods(["single"], context), [task]))
    assert outcome.correct is None and outcome.error == record.infra_error


def test_a_fractional_score_moves_the_reward_between_wrong_and_correct(tmp_path, user_module):
    config = config_with(tmp_path, entry(tmp_path, f"{user_module}:share"))
    task = load_tasks(config.data.datasets[0])[0]
    rewards = RewardConfig(wrong=0.2, correct=1.0, cost_penalty_per_usd=1.0)
    half = EpisodeScorer(rewards=rewards).score_now(task, Attempt(answer="Answer: blue"))
    assert half.status is Status.CORRECT and half.score == 0.5 and half.reward == pytest.approx(0.6)
    none = score_of(episode("Answer: green", cost=0.1), verify(task, "Answer: green"), rewards)
    assert none.status is Status.WRONG and none.score == 0.0 and none.reward == pytest.approx(0.2 - 0.1)
    whole = score_of(episode("Answer: red blue", cost=0.1), verify(task, "Answer: red blue"), rewards)
    assert whole.reward == pytest.approx(1.0 - 0.1)
    unparsed = EpisodeResult([RoundTrace(0, "text", parse_error=ParseFailure.TRUNCATED)], answer=None)
    assert score_of(unparsed, verify(task, "Answer: red blue"), rewards).reward == rewards.format_error

    # a training record keeps its score, so repricing under a token budget keeps the fraction
    record = RolloutRecord("r", "g", task.id, 0, [], [], [], "", format_ok=True, correct=True, reward=0.6,
                           score=0.5)
    budget = TokenBudget.of(RewardConfig(wrong=0.2, worker_token_budget=100, cost_penalty_per_1k_worker_tokens=0))
    assert budget.reprice([record])[0].reward == pytest.approx(0.6)
    assert budget.reprice([dataclasses.replace(record, score=None)])[0].reward == pytest.approx(1.0)


def test_a_graded_score_reaches_training_records_and_evaluation_outcomes_and_their_means(tmp_path, user_module):
    config = config_with(tmp_path, entry(tmp_path, f"{user_module}:share"))
    tasks = load_tasks(config.data.datasets[0])  # "red blue" and "orange": "Answer: red" scores 0.5 and 0.0
    workers = [WorkerSpec(id="w", description="answers")]
    pool = ScriptedPool({"w": "Answer: red"})
    config = Config(data=config.data, pool=PoolConfig(workers=workers), prompt={"num_fewshot": 0})
    records = asyncio.run(RolloutRunner(config, FakeTokenizer(), FixedRouter(lambda: 0), pool).run(tasks, group_size=1))
    assert [r.score for r in records] == [0.5, 0.0] and rollout_stats(records).mean_score == 0.25
    context = MethodContext(Roster.full(workers), WorkflowExecutor(pool))
    outcomes = asyncio.run(Harness().run(build_methods(["single"], context), tasks))
    assert sorted(o.score for o in outcomes) == [0.0, 0.5]
    assert summarise(outcomes)["single:w"][AVERAGE].mean_score == 0.25


def test_the_simulator_states_a_python_tasks_answer_as_a_text_answer(tmp_path, user_module):
    [spec] = config_with(tmp_path, entry(tmp_path, f"{user_module}:last_line")).data.datasets
    task = load_tasks(spec)[1]
    worker = SimWorker("w", "d", {}, answer_tokens=20)
    right = render_answer(task, own_value(task, True, 0.0), worker, "solve", 0.3)
    wrong = render_answer(task, own_value(task, False, 0.4), worker, "solve", 0.3)
    assert right.endswith("\nAnswer: orange") and verify(task, right).score == 1.0
    assert verify(task, wrong).score == 0.0


def test_a_process_that_cannot_import_the_reward_fails_when_its_rollouts_start(tmp_path, user_module, monkeypatch):
    """As a rollout actor whose job did not ship the module: the runner refuses to start, naming it."""
    config = config_with(tmp_path, entry(tmp_path, f"{user_module}:share"))
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.endswith("user_code")])
    sys.modules.pop(user_module)
    monkeypatch.setattr(python_reward, "_functions", PerProcess())
    with pytest.raises(python_reward.RewardImportError, match=rf"reward function '{user_module}:share' in this "
                       r"process: cannot import .*ship the module with the job"):
        RolloutRunner(config, FakeTokenizer(), FixedRouter(lambda: 0), ScriptedPool({}))


def test_a_reward_named_by_its_file_path_loads_from_the_working_directory(tmp_path, monkeypatch):
    folder = tmp_path / "my-task"  # a folder name that is no module name: only the path form reaches it
    folder.mkdir()
    (folder / "scoring.py").write_text(REWARDS)
    monkeypatch.chdir(tmp_path)
    reference = "my-task/scoring.py:last_line"
    assert python_reward.check_reference(reference) == reference
    [spec] = config_with(tmp_path, entry(tmp_path, reference)).data.datasets
    task = load_tasks(spec)[0]
    assert verify(task, "working\nAnswer: " + task.answer).score == 1.0
    assert not verify(task, "Answer: something else").correct
    assert python_reward.resolve("my-task/scoring.py:Judge.score")(task, "x") == 1.0
    for reference, message in [("my-task/absent.py:score", "no file my-task/absent.py"),
                               ("my-task/scoring.py:absent", "has no 'absent'"),
                               ("my-task/scoring.py:", "is not 'module:function' or 'path/to/file.py:function'"),
                               ("my-task/scoring:score", "is not 'module:function'")]:
        with pytest.raises(python_reward.RewardImportError, match=re.escape(message)):
            python_reward.check_reference(reference)
    # a module that looks itself up while it runs (a dataclass under postponed annotations) loads as imported
    (folder / "graded.py").write_text("from __future__ import annotations\nfrom dataclasses import dataclass\n\n\n"
                                      "@dataclass\nclass Grade:\n    value: float = 1.0\n\n\n"
                                      "def score(task, response):\n    return Grade().value\n")
    assert python_reward.resolve("my-task/graded.py:score")(task, "x") == 1.0
    (folder / "broken.py").write_text("raise RuntimeError('half-way')\n")
    for _ in range(2):  # a module that failed is not kept half-run: it fails again, the same way
        with pytest.raises(python_reward.RewardImportError, match="half-way"):
            python_reward.check_reference("my-task/broken.py:score")


def test_a_reward_that_hangs_is_an_infra_error_after_its_timeout_and_holds_only_its_own_threads(tmp_path,
                                                                                                user_module):
    reference = f"{user_module}:sleeps"
    config = config_with(tmp_path, entry(tmp_path, reference), ["verifier.python_reward_timeout_s=0.2",
                                                                "verifier.python_reward_threads=2"])
    task = load_tasks(config.data.datasets[0])[0]
    module = sys.modules[user_module]
    try:
        # each call returns to its caller after the timeout; the hung call keeps one of the reward's 2 threads
        for _ in range(2):
            verdict = verify(task, "Answer: red", config.verifier)
            assert verdict.score is None and not verdict.correct
            assert verdict.infra_error == (f"reward function {reference} gave no score within 0.2 s "
                                           "(verifier.python_reward_timeout_s)")
        assert python_reward._calls[reference].overdue == 2
        # both threads hung: the next call is not made at all, and says why
        saturated = verify(task, "Answer: red", config.verifier)
        assert saturated.infra_error == (f"reward function {reference} was not called: all 2 threads busy for "
                                         "0.2 s (2 of them in calls past the timeout) "
                                         "(verifier.python_reward_threads)")
        scored = score_of(episode(), saturated)
        assert scored.status is Status.INFRA_ERROR and scored.reward is None
    finally:
        module.RELEASE.set()
    deadline = time.monotonic() + 60  # the hung calls return once released, and give their threads back
    while python_reward._calls[reference].overdue and time.monotonic() < deadline:
        time.sleep(0.05)
    assert python_reward._calls[reference].overdue == 0
    generous = config.verifier.model_copy(update={"python_reward_timeout_s": 60.0})
    assert verify(task, "Answer: red", generous).score == 1.0


def test_a_preset_format_is_scored_by_the_users_reward_with_its_own_prompt(tmp_path, user_module):
    path = tmp_path / "gsm8k.jsonl"
    path.write_text(json.dumps({"question": "Tom has 3 apples and buys 4. How many?", "answer": "3 + 4 = 7\n#### 7"})
                    + "\n")
    preset = {"format": "gsm8k", "path": str(path)}
    [built_in] = load_tasks(config_with(tmp_path, preset).data.datasets[0])
    config = config_with(tmp_path, {**preset, "verifier": "python", "reward_function": f"{user_module}:hashes"})
    [task] = load_tasks(config.data.datasets[0])
    assert (task.verifier, task.reward_function) == ("python", f"{user_module}:hashes")
    assert (task.id, task.prompt, task.answer, task.meta) == (built_in.id, built_in.prompt, "7", built_in.meta)
    assert verify(task, "3 and 4 make 7.\n#### 7").score == 1.0
    assert verify(task, "#### 8").score == 0.0


@pytest.mark.parametrize("extra, message", [
    ({"verifier": "text"}, r"format gsm8k scores with its own verifier; the ones it takes instead are python"),
    ({"reward_function": "{m}:hashes"}, r"reward_function is for verifier python; format gsm8k's verifier scores"),
    ({"verifier": "python"}, r"verifier python needs reward_function"),
    ({"verifier": "python", "reward_function": "{m}:hashes", "instruction": ""},
     r"format gsm8k is a built-in field map; give it or instruction"),
])
def test_a_preset_takes_only_a_users_reward_in_place_of_its_verifier(tmp_path, user_module, extra, message):
    dataset = {"format": "gsm8k", "path": str(tmp_path / "gsm8k.jsonl"),
               **{key: value.format(m=user_module) for key, value in extra.items()}}
    with pytest.raises(ConfigError, match=message):
        config_with(tmp_path, dataset)
