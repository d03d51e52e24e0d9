"""One place scores an episode (conductor/episode_score.py): training's records and evaluation's outcomes
agree on what is correct, wrong or an infrastructure error, a refused sandbox run included; and the best
single worker of summary.json is the evaluation report's, asked in the same words."""

import asyncio

import pytest

from cluster.train_report import baseline_summary
from conductor.baselines import FixedRouter, evaluate_baselines
from conductor.config import Config, PoolConfig, SimulatorConfig, VerifierConfig, WorkerSpec
from conductor.episode import EpisodeResult
from conductor.episode_score import EpisodeScorer, Status, score_of
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import RECURSIVE_TURN, Attempt
from conductor.evaluation.registry import build_methods
from conductor.evaluation.report import AVERAGE, best_of, summarise
from conductor.executor import WorkflowExecutor
from conductor.rewards import RewardConfig
from conductor.rollout import RolloutRunner
from conductor.roster import Roster
from conductor.scripted_pool import ScriptedPool
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.tasks.task import Task
from conductor.trace import RoundTrace, StepTrace
from conductor.verifiers.verdict import Verdict
from conductor.workflow import ParseFailure
from tests.support.direct_pool import DirectPool
from tests.test_sandbox import HUMANEVAL_TASK, RIGHT, on_a_host_without_user_namespaces

REFUSED = "refused: isolation layers unavailable on this host: user_namespace"


class FakeTokenizer:
    """Prompt ids without a model: the fixed routers never read them."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list(range(sum(len(m["content"]) for m in messages) // 50))


def step(tokens_in=30, tokens_out=20, cost=0.002, response="Answer: 4") -> StepTrace:
    return StepTrace(round=0, index=0, shown_worker=0, worker_id="w", subtask="s", access=(), visible=(),
                     response=response, tokens_in=tokens_in, tokens_out=tokens_out, cost_usd=cost)


def test_each_status_with_its_reward_tokens_and_cost():
    rewards = RewardConfig(cost_penalty_per_usd=10.0)
    episode = EpisodeResult([RoundTrace(0, "text", steps=[step()])], answer="Answer: 4")
    right = score_of(episode, Verdict(True, "4"), rewards)
    assert right.status is Status.CORRECT and right.judged is True and right.reward == pytest.approx(1.0 - 0.02)
    assert (right.worker_tokens, right.cost_usd) == (50, 0.002)
    wrong = score_of(episode, Verdict(False, "5"), rewards)
    assert wrong.status is Status.WRONG and wrong.judged is False and wrong.reward == pytest.approx(0.5 - 0.02)

    unparsed = EpisodeResult([RoundTrace(0, "text", parse_error=ParseFailure.TRUNCATED)], answer=None)
    formatted = score_of(unparsed, Verdict(True), rewards)  # a verdict it never reached is ignored
    assert formatted.status is Status.WRONG and formatted.reward == 0.0 and formatted.verdict is None

    outage = EpisodeResult([RoundTrace(0, "text", steps=[step(response=None)], infra_error="w: server_error")])
    for unscored, reason in ((score_of(outage, None, rewards), "w: server_error"),
                             (score_of(episode, Verdict(False, infra_error=REFUSED), rewards), "verifier: " + REFUSED)):
        assert unscored.status is Status.INFRA_ERROR and unscored.infra_error == reason
        assert unscored.reward is None and unscored.judged is None and not unscored.correct


def test_an_evaluation_attempt_is_scored_as_a_training_episode():
    """A root that failed to parse has no answer of its own; a recursive turn that failed leaves it standing."""
    scorer = EpisodeScorer()
    task = Task("m/1", "math", "2 + 2?", "4", "number")
    stands = Attempt(answer="Answer: 4", steps=[step()], parse_error=RECURSIVE_TURN + "truncated")
    assert asyncio.run(scorer.score(task, stands)).status is Status.CORRECT
    root = Attempt(answer=None, parse_error="truncated")
    assert asyncio.run(scorer.score(task, root)).status is Status.WRONG
    timed_out = step(response=None)
    timed_out.error = "w: timeout"
    assert asyncio.run(scorer.score(task, Attempt.alone(timed_out))).infra_error == "w: timeout"


def scored_both_ways(required: bool) -> dict:
    """One right code answer scored by training's path (a fixed router's rollout record) and evaluation's
    (the harness's outcome and its report cell), and by the demo's synchronous path."""
    verifier = VerifierConfig(code_timeout_s=5, require_code_isolation=required)
    workers = [WorkerSpec(id="coder", description="writes code")]
    pool = ScriptedPool({"coder": RIGHT})
    config = Config(pool=PoolConfig(workers=workers), prompt={"num_fewshot": 0}, verifier=verifier)
    [record] = asyncio.run(RolloutRunner(config, FakeTokenizer(), FixedRouter(lambda: 0), pool).run(
        [HUMANEVAL_TASK], group_size=1))
    context = MethodContext(Roster.full(workers), WorkflowExecutor(pool), verifier=verifier)
    [outcome] = asyncio.run(Harness(verifier).run(build_methods(["single"], context), [HUMANEVAL_TASK]))
    cell = summarise([outcome])["single:coder"][AVERAGE]
    demo = EpisodeScorer(verifier).score_now(HUMANEVAL_TASK, Attempt(answer=RIGHT))
    return {"training": [record.correct, record.reward, record.infra_error],
            "evaluation": [outcome.correct, outcome.error], "report": [cell.infra_errors, cell.n],
            "demo": [demo.status.value, demo.infra_error]}


def test_a_refused_sandbox_run_is_an_infra_error_in_training_and_in_evaluation():
    """With ``require_code_isolation`` on a host that forbids user namespaces (a real kernel refusal), the
    same right answer is unscored in both, for the same reason, and the report counts it; allowed to run
    with the weaker layers, it is right in both."""
    out = on_a_host_without_user_namespaces(
        "import json\nfrom tests.test_episode_score import scored_both_ways\n"
        "print(json.dumps({'required': scored_both_ways(True), 'allowed': scored_both_ways(False)}))")
    required = out["required"]
    correct, reward, reason = required["training"]
    assert correct is False and reward is None and reason.startswith("verifier: refused: isolation layers")
    assert required["evaluation"] == [None, reason]
    assert required["report"] == [1, 0]  # counted as an infra error, out of accuracy's denominator
    assert required["demo"] == ["infra_error", reason]
    allowed = out["allowed"]
    assert allowed["training"] == [True, 1.0, None] and allowed["evaluation"] == [True, None]
    assert allowed["report"] == [0, 1] and allowed["demo"] == ["correct", None]


def test_summary_and_report_name_the_same_best_single_worker():
    """On one split and pool, summary.json's single workers (training's fixed routers) and the report's
    ``single:*`` rows ask the same thing: the same accuracies, and the same tokens. The split is
    unbalanced on purpose: over questions and over domains are then different figures, and summary.json's
    ``*_domain_*`` ones are the report's."""
    sim = SimulatorConfig(preset="toy", toy_items_per_domain=30)
    preset = load_preset(sim)
    by_domain = {d: [t for t in preset.tasks if t.domain == d] for d in ("arithmetic", "reverse", "sort")}
    tasks = by_domain["arithmetic"][:24] + by_domain["reverse"][:8] + by_domain["sort"][:8]
    pool_config = simulated_pool_config(preset, "http://127.0.0.1:9/v1")
    config = Config(pool=pool_config, prompt={"num_fewshot": 0})
    pool = DirectPool(Oracle(preset, sim))
    baselines = asyncio.run(evaluate_baselines(config, tasks, FakeTokenizer(), pool))
    summary = baseline_summary(baselines)
    executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility,
                                parallel=config.executor.parallel_steps)
    context = MethodContext(Roster.full(pool_config.workers), executor)
    outcomes = asyncio.run(Harness().run(build_methods(["single"], context), tasks))
    table = summarise(outcomes)

    best, cell = best_of(table, "single:", AVERAGE)
    assert best == f"single:{summary['best_single_domain_worker']}"
    assert cell.accuracy == pytest.approx(summary["best_single_domain_accuracy"], abs=1e-12)
    for worker in summary["single_worker_accuracy"]:
        mine = [o for o in outcomes if o.method == f"single:{worker}"]
        assert summary["single_worker_accuracy"][worker] == pytest.approx(
            sum(o.correct for o in mine) / len(mine), abs=1e-12)
        assert summary["single_worker_domain_accuracy"][worker] == pytest.approx(
            table[f"single:{worker}"][AVERAGE].accuracy, abs=1e-12)
        assert baselines[worker]["domain_worker_tokens"] == pytest.approx(
            table[f"single:{worker}"][AVERAGE].worker_tokens, abs=1e-9)  # the same prompt, word for word
    pooled_best = max(summary["single_worker_accuracy"], key=summary["single_worker_accuracy"].get)
    assert summary["best_single_worker"] == pooled_best
    assert summary["best_single_worker"] != summary["best_single_domain_worker"]  # why both are kept


def test_a_verifier_that_raises_is_an_infra_error_and_a_cached_failure_is_asked_again(monkeypatch):
    """A plug-in's bug (here a verifier that raises once, then answers) costs one answer's score, not the
    batch or the evaluation; with the verdict cache, a failed verdict is not kept, so the next attempt with
    the same answer asks again."""
    from conductor.verifiers import registry
    from conductor.verifiers.kinds import text

    calls = []

    def flaky(task, response, settings):
        calls.append(response)
        if len(calls) == 1:
            raise TypeError("a plug-in bug that quotes http://user:secret@reward/ in its message")
        return Verdict(True, response)

    name = "flaky"
    monkeypatch.setattr(registry._REGISTRY, "specs", dict(registry._REGISTRY.all()))  # restored after the test
    registry.register(registry.VerifierSpec(name, flaky, text.final_value, text.answer_key, text.INSTRUCTION))
    task = Task("t/0", "d", "q", "4", verifier=name)
    episode = EpisodeResult([RoundTrace(0, "text", steps=[step()])], answer="4")
    scorer = EpisodeScorer(cache=True)

    async def twice():
        return await scorer.score(task, episode), await scorer.score(task, episode)

    first, second = asyncio.run(twice())
    assert first.status is Status.INFRA_ERROR and first.reward is None
    assert first.infra_error == f"verifier: the {name} verifier raised TypeError"  # the type only: no secret
    assert second.status is Status.CORRECT and len(calls) == 2


def test_a_scorer_of_its_own_has_threads_enough_for_its_plug_ins_batches():
    """Evaluation and calibration verify on threads of their own: two for code answers, but a reward
    server's checks share a POST only while they wait together, so its batch_size of them."""
    from conductor.episode_score import SANDBOX_THREADS, scoring_threads
    from conductor.verifiers.http_reward import RewardServer

    code = Task("h/0", "humaneval", "q", "", verifier="humaneval")
    served = Task("s/0", "d", "q", "1", verifier="http", reward_server=RewardServer(url="http://127.0.0.1:9/s",
                                                                                    batch_size=24))
    graded = Task("p/0", "d", "q", "1", verifier="python", reward_function="m:f")
    assert scoring_threads([code]) == SANDBOX_THREADS == 2
    assert scoring_threads([code, served]) == 24
    assert scoring_threads([graded], VerifierConfig(python_reward_threads=5)) == 5
