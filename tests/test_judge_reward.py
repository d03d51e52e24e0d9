"""An LLM judge as the reward (``verifier: judge``): a judge worker of the pool grades the final answer against
a rubric, through the real pool (LocalPool, the official openai client) to the real simulator server on
loopback, whose simulated judge knows each item's truth. A reply with no score is asked again, then the
answer is an infrastructure error; k samples combine by majority or mean; what the judge spent is counted
apart from the workers' figures and their cost penalty, in training's records and evaluation's report."""

import asyncio
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml
from rich.console import Console

from cluster.evaluate import run as evaluate
from cluster.train_report import heldout_summary, judge_summary, log_line
from conductor.baselines import FixedRouter
from conductor.config import Config, DatasetSpec, JudgeConfig, SimulatorConfig, WorkerSpec
from conductor.config_loader import ConfigError, load_config
from conductor.episode_score import EpisodeScorer, Status
from conductor.evaluation.outcome import Attempt
from conductor.judge_config import judge_worker
from conductor.local_pool import LocalPool
from conductor.replay_store import ReplayStore
from conductor.rewards import RewardConfig
from conductor.rollout import RolloutRunner
from conductor.rollout_record import from_table, to_table
from conductor.rollout_summary import summarise
from conductor.simulator.preset_file import SHIPPED_DIR
from conductor.simulator.presets import SimWorker, simulated_pool_config
from conductor.simulator.render import own_value, render_answer
from conductor.simulator.server import SimulatorServer
from conductor.tasks import load_tasks
from conductor.tasks.open_ended import open_ended_entry
from conductor.verifiers.judge import DEFAULT_RUBRIC, NO_REFERENCE, PoolJudge, judge_prompt, parse_score
from tests.test_episode_score import FakeTokenizer

WORKER = SimWorker("w", "d", {}, answer_tokens=30)


def open_tasks(entry=None):
    """The shipped open-ended set, read through a dataset entry (its own, or ``entry``)."""
    return load_tasks(DatasetSpec.model_validate(entry or open_ended_entry()))


def preset_file(tmp_path: Path, **judge) -> str:
    """The shipped toy-judged preset with its judge's knobs changed."""
    spec = yaml.safe_load((SHIPPED_DIR / "toy-judged.yaml").read_text())
    spec["judge"].update(judge)
    path = tmp_path / f"judged-{len(list(tmp_path.glob('judged-*')))}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return str(path)


def simulated(tmp_path: Path, **judge) -> SimulatorServer:
    return SimulatorServer(SimulatorConfig(preset=preset_file(tmp_path, **judge), port=0, latency_scale=0))


def reply(task, right: bool, draw: float = 0.4) -> str:
    """A simulated worker's whole reply, right or wrong, as the episode's final answer."""
    return render_answer(task, own_value(task, right, draw), WORKER, "solve", 0.5)


def judged(sim: SimulatorServer, pairs, **settings):
    """[(task, response)] -> [Judgement], graded by the simulator's judge through a LocalPool over HTTP."""
    pool_config = simulated_pool_config(sim.state.preset, sim.base_url)

    async def main():
        pool = LocalPool(pool_config)
        try:
            judge = PoolJudge(JudgeConfig(**settings), pool, "toy-judge")
            return await asyncio.gather(*(judge.judge(task, response) for task, response in pairs))
        finally:
            await pool.close()

    return asyncio.run(main())


def judge_requests(sim: SimulatorServer) -> int:
    return sum(1 for entry in sim.state.log if entry["worker"] == "toy-judge")


@pytest.mark.parametrize(("text", "score"), [
    ("Looks right.\nScore: 1", 1.0), ("**Score:** 0.5", 0.5), ("score = 7/10", 0.7), ("Score: 0\nScore: 1", 1.0),
    ("The answer is right.", None), ("Score: 1.5", None), ("Score: -1", None), ("Score: 3/0", None),
    ("underscore: 1", None), ("Score: 0\nConfidence score: 0.9", 0.0),
    ("Score: 0 (a fully right answer would be score = 1)", 0.0),
    ("Score: 0\n\n(An answer that named Paris would have earned score: 1.)", 0.0), ("Score: 1e-3", None),
    ("Score: 0,5", None), ("- Final score: 1.", 1.0), ("> Score: 2/4", 0.5), ("Score: 1/2.5e3", None)])
def test_the_verdict_is_the_last_score_line_in_zero_to_one(text, score):
    assert parse_score(text) == score


def test_the_simulated_judge_grades_by_the_items_truth_and_errs_at_its_rate(tmp_path):
    tasks = open_tasks()
    pairs = [(task, reply(task, right)) for task in tasks for right in (True, False)]
    with simulated(tmp_path, error_rate=0.0) as sim:
        exact = judged(sim, pairs)
    with simulated(tmp_path, error_rate=0.3) as sim:
        noisy = judged(sim, pairs)
    with simulated(tmp_path, error_rate=0.3) as sim:
        again = judged(sim, pairs)
    assert [j.verdict.correct for j in exact] == [right for _ in tasks for right in (True, False)]
    assert {j.verdict.score for j in exact} == {0.0, 1.0}
    flipped = sum(a.verdict.correct != b.verdict.correct for a, b in zip(exact, noisy))
    assert 0.15 * len(pairs) < flipped < 0.45 * len(pairs)  # 0.3 of 60 verdicts, seeded: 18 expected
    assert [j.verdict.correct for j in again] == [j.verdict.correct for j in noisy]  # deterministic
    judgement = exact[0]
    assert judgement.usage.calls == 1 and judgement.usage.prompt_tokens > 100 and judgement.usage.completion_tokens > 0
    assert judgement.usage.cost_usd == pytest.approx((judgement.usage.prompt_tokens * 1.0
                                                      + judgement.usage.completion_tokens * 4.0) / 1e6)


def test_a_dataset_without_a_reference_is_judged_by_the_simulators_truth(tmp_path):
    entry = {**open_ended_entry(), "fields": {"question": "question", "id": "id", "domain": "domain"}}
    task = open_tasks(entry)[0]
    assert task.answer == "" and NO_REFERENCE in judge_prompt(DEFAULT_RUBRIC, task, "Answer: x")
    with simulated(tmp_path, error_rate=0.0) as sim:
        truth = sim.state.oracle.find_task([{"role": "user", "content": task.prompt}])
        right, wrong = judged(sim, [(task, reply(truth, True)), (task, reply(truth, False))])
    assert right.verdict.correct and not wrong.verdict.correct


def test_a_reply_without_a_score_is_asked_again_then_the_answer_is_an_infra_error(tmp_path):
    task = open_tasks()[0]
    with simulated(tmp_path, unparseable_rate=1.0) as sim:
        [never] = judged(sim, [(task, reply(task, True))], parse_retries=2)
        assert judge_requests(sim) == 3
    assert never.verdict.infra_error.startswith("judge toy-judge: no 'Score: S' line (S in [0, 1]) in 3 replies")
    assert never.verdict.score is None and never.usage.calls == 3 and never.usage.cost_usd > 0  # paid for all three

    tasks = open_tasks()
    with simulated(tmp_path, unparseable_rate=0.5) as sim:
        some = judged(sim, [(t, reply(t, True)) for t in tasks], parse_retries=3)
    retried = [j for j in some if j.usage.calls > 1]
    assert retried and any(j.verdict.infra_error is None for j in retried)  # a fresh draw on a retry
    assert all(j.usage.calls == 4 for j in some if j.verdict.infra_error)


def test_k_samples_combine_by_majority_or_mean(tmp_path):
    tasks = open_tasks()
    pairs = [(task, reply(task, True)) for task in tasks]
    with simulated(tmp_path, error_rate=0.3) as sim:
        means = judged(sim, pairs, samples=3, aggregate="mean")
        majorities = judged(sim, pairs, samples=3, aggregate="majority")
    assert all(j.usage.calls == 3 for j in means + majorities)
    assert {j.verdict.score for j in means} > {1.0} and {j.verdict.score for j in means} <= {0, 1 / 3, 2 / 3, 1.0}
    for mean, majority in zip(means, majorities):  # the same three draws (seeded per sample), combined two ways
        assert majority.verdict.score == (1.0 if mean.verdict.score > 0.5 else 0.0)
        assert mean.verdict.correct == (mean.verdict.score >= 0.5)


def test_training_records_and_the_evaluation_report_count_the_judge_apart_from_the_workers(tmp_path):
    """The rollout runner (training's scoring) and cluster.evaluate (no Ray) over the simulated toy-judged pool:
    the judge's calls, tokens and $ in the records, the step log line, summary.json's figures and the report;
    the reward's cost penalty prices the workers' $ only; the spend cap counts both."""
    rewards = RewardConfig(cost_penalty_per_usd=100.0)
    with simulated(tmp_path, error_rate=0.0) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url)
        config = Config(pool=pool_config, reward=rewards, prompt={"num_fewshot": 0},
                        data={"datasets": [open_ended_entry()]})
        tasks = load_tasks(config.data.datasets[0])[::5]  # two of each domain
        solves = [sim.state.oracle.base_correct[("toy-researcher", task.id)] for task in tasks]

        async def roll():
            pool = LocalPool(pool_config)
            try:
                runner = RolloutRunner(config, FakeTokenizer(), FixedRouter(lambda: 1), pool)
                return await runner.run(tasks, 1), pool.stats()
            finally:
                await pool.close()

        records, pool_stats = asyncio.run(roll())
    assert all(r.judge_calls == 1 and r.judge_tokens > 0 and r.judge_cost_usd > 0 for r in records)
    # the pool's $ counter, which a training run's spend cap reads (conductor/spend_meter.py), holds both
    assert pool_stats["sim"]["cost_usd"] == pytest.approx(sum(r.cost_usd + r.judge_cost_usd for r in records))
    for record in records:
        worker_usd = sum(step["cost_usd"] for step in record.steps)
        assert record.cost_usd == pytest.approx(worker_usd)  # the judge's $ is not the workers'
        assert record.reward == pytest.approx(max((1.0 if record.correct else 0.5) - 100.0 * worker_usd, 0.0))
    assert [r.correct for r in records] == solves and len(set(solves)) == 2  # toy-researcher; an exact judge

    stats = summarise(records)
    assert stats.judge_calls_per_rollout == 1.0
    assert stats.judge_cost_usd_per_rollout == pytest.approx(sum(r.judge_cost_usd for r in records) / 6)
    row = {"step": 1, "version": 2, **stats.as_dict()}
    assert f"judge 1.00 calls {stats.judge_tokens_per_rollout:.0f} tok ${stats.judge_cost_usd_per_rollout:.5f}" \
        in log_line(row)
    assert "judge" not in log_line({**row, "judge_calls_per_rollout": 0.0})
    assert judge_summary([row, row])["judge_calls"] == 12
    assert heldout_summary(stats, tasks)["heldout_judge_cost_usd"] == pytest.approx(sum(r.judge_cost_usd
                                                                                         for r in records))

    old = tmp_path / "store" / "policy_version=0"  # a store written before the judge columns reads them as 0
    old.mkdir(parents=True)
    pq.write_table(to_table(records).drop_columns(["judge_calls", "judge_tokens", "judge_cost_usd"]),
                   old / "batch-0.parquet")
    assert {r.judge_calls for r in from_table(ReplayStore(str(tmp_path / "store")).read()[0])} == {0}

    eval_config = load_config(None, [f"output.dir={tmp_path}", "run_name=ev", "simulator.preset=toy-judged",
                                     "simulator.latency_scale=0", "evaluate.methods=[single,oracle]",
                                     "evaluate.questions_per_domain=2", "evaluate.repeats=2"])
    evaluate(eval_config, Console(width=200))
    outcomes = pq.read_table(tmp_path / "ev" / "outcomes.parquet").to_pylist()
    singles = [o for o in outcomes if o["method"].startswith("single:")]
    assert len(singles) == 3 * 6 * 2 and all(o["error"] is None for o in singles)
    # an answer graded once (a repeat gives the same one) is not paid for again: 18 answers, fewer distinct
    assert 0 < sum(o["judge_calls"] for o in singles) <= 18
    # One verdict per (question, answer), paid by whichever attempt is graded first (they run concurrently): a
    # worker's repeat gives its same answer, and two workers may give the same one.
    paid: dict = {}
    for o in singles:
        paid[o["method"], o["task_id"]] = paid.get((o["method"], o["task_id"]), 0) + o["judge_calls"]
    assert set(paid.values()) <= {0, 1}
    assert {task for _, task in paid} == {task for (_, task), calls in paid.items() if calls}
    report = json.loads((tmp_path / "ev" / "report.json").read_text())
    spent = sum(o["judge_usd"] for o in singles)
    assert report["meta"]["judge"]["worker"] == "toy-judge"
    assert report["meta"]["judge"]["calls"] == sum(o["judge_calls"] for o in singles)
    assert report["meta"]["judge"]["cost_usd"] == pytest.approx(spent)
    cells = [report["methods"][f"single:{w}"]["average"] for w in ("toy-strategist", "toy-researcher", "toy-explainer")]
    assert sum(cell["judge_usd"] for cell in cells) * 12 == pytest.approx(spent)  # means over 12 attempts each
    worker_usd = sum(o["usd"] for o in singles)
    assert sum(cell["usd"] for cell in cells) * 12 == pytest.approx(worker_usd)  # the workers' $ alone
    markdown = (tmp_path / "ev" / "report.md").read_text()
    assert "## The judge" in markdown and "| judge calls | judge tokens | judge $ / question |" in markdown


def test_a_judge_call_that_fails_for_good_is_an_infra_error(tmp_path):
    """The judge's model is unknown to the provider: a 404, which the pool does not retry."""
    with simulated(tmp_path) as sim:
        pool_config = simulated_pool_config(sim.state.preset, sim.base_url)
        broken = pool_config.model_copy(update={"judges": [WorkerSpec(id="toy-judge", description="j", provider="sim",
                                                                       model="no-such-model")]})
        task = open_tasks()[0]

        async def score():
            pool = LocalPool(broken)
            try:
                judge = PoolJudge(JudgeConfig(), pool, "toy-judge")
                return await EpisodeScorer(judge=judge).score(task, Attempt(answer=reply(task, True)))
            finally:
                await pool.close()

        scored = asyncio.run(score())
    assert scored.status is Status.INFRA_ERROR and scored.reward is None and scored.judged is None
    assert scored.infra_error.startswith("verifier: judge toy-judge: not_found") and scored.judge.calls == 1


def test_without_a_judge_bound_a_judged_answer_is_unscored():
    task = open_tasks()[0]
    scored = EpisodeScorer().score_now(task, Attempt(answer="Answer: " + task.answer))
    assert scored.status is Status.INFRA_ERROR and "needs a judge worker" in scored.infra_error


REAL_POOL = ["pool.providers=[{id: p, base_url: 'http://127.0.0.1:9/v1'}]",
             "pool.workers=[{id: w, provider: p, description: d}]"]


@pytest.mark.parametrize(("overrides", "message"), [
    (REAL_POOL, r"data\.datasets\.0 is judged \(verifier judge\): set judge\.worker"),
    ([*REAL_POOL, "judge.worker=nobody"], r"judge\.worker 'nobody' is not a worker of the pool"),
    (["simulator.preset=toy"], r"data\.datasets\.0 is judged .* preset toy has no judge"),
    (["simulator.preset=toy-judged", "judge.worker=w"], r"judge\.worker 'w': the simulated pool's judge is toy-judge"),
    (["judge.rubric='Grade {answer} against {gold}'"], r"judge\.rubric.*placeholders \['gold'\] are unknown"),
    (["judge.rubric='Grade the reply to {question}'"], r"judge\.rubric.*must show the judge the \{answer\}"),
    (["judge.rubric='Grade {answer:d}'"], r"judge\.rubric.*cannot be filled with text \(ValueError"),
    (["judge.samples=2"], r"samples 2 with aggregate majority can tie"),
])
def test_a_judge_that_cannot_be_called_fails_at_config_load_naming_the_setting(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [f"data.datasets=[{json.dumps(open_ended_entry())}]", *overrides])


def test_the_judge_is_a_worker_of_the_pool_or_its_one_judge_kept_off_the_roster():
    data = f"data.datasets=[{json.dumps(open_ended_entry())}]"
    config = load_config(None, [data, *REAL_POOL, "pool.judges=[{id: j, provider: p, description: grades}]"])
    assert judge_worker(config.judge, config.pool) == "j"
    assert [w.id for w in config.pool.workers] == ["w"] and [w.id for w in config.pool.routes()["p"]] == ["w", "j"]
    config = load_config(None, [data, *REAL_POOL, "judge.worker=w"])  # a routable worker may judge too
    assert judge_worker(config.judge, config.pool) == "w"
    with pytest.raises(ConfigError, match="duplicate worker ids"):
        load_config(None, [*REAL_POOL, "pool.judges=[{id: w, provider: p, description: grades}]"])
