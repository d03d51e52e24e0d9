"""The Conductor as an evaluation method, with a scripted generator in place of the policy (the vLLM path
is test_evaluate_conductor.py): its workflows run on the simulated orchestra, an unparsable root is a
wrong answer with the reason kept, a recursive round can accept or replace the answer, the report carries
the workflow statistics; and the batched generator gathers concurrent callers into one engine call."""

import asyncio
import json

import pytest

from conductor.config import Config, SimulatorConfig
from conductor.episode import EpisodeRunner
from conductor.evaluation.conductor_method import ConductorPolicy, is_conductor
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.paper_reference import DOMAINS
from conductor.evaluation.registry import build_methods
from conductor.evaluation.report import AVERAGE, Cell, summarise
from conductor.evaluation.report_files import paper_comparison, write_report
from conductor.evaluation.workflow_stats import markdown_lines, workflow_stats
from conductor.example_workflows import shape_workflow
from conductor.executor import WorkflowExecutor
from conductor.rollout import PROMPT_TOO_LONG, Sample, SamplingSettings
from conductor.roster import Roster
from conductor.simulator.oracle import Oracle
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.vllm_sampler import BatchedGenerator
from tests.support.direct_pool import DirectPool


class ScriptedGenerator:
    """Answers each generate call with the next text; counts calls and prompts."""

    def __init__(self, texts, finish_reason="stop"):
        self.texts, self.finish_reason, self.calls = list(texts), finish_reason, []

    async def generate(self, prompts, n, sampling):
        self.calls.append(len(prompts))
        return [[Sample(list(p), [1] * 7, [0.0] * 7, self.texts.pop(0) if len(self.texts) > 1 else self.texts[0],
                        self.finish_reason, 0) for _ in range(n)] for p in prompts]


class FakeTokenizer:
    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list(range(sum(len(m["content"]) for m in messages) // 50))


@pytest.fixture(scope="module")
def orchestra(shared_data):
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=60)
    preset = load_preset(config)
    pool_config = simulated_pool_config(preset, "http://127.0.0.1:9/v1")
    return preset, Oracle(preset, config), pool_config


def context_for(orchestra, generator, max_rounds=1):
    from conductor.prompt_builder import PromptBuilder

    preset, oracle, pool_config = orchestra
    config = Config(pool=pool_config, prompt={"num_fewshot": 0})
    executor = WorkflowExecutor(DirectPool(oracle))
    prompts = PromptBuilder(config, FakeTokenizer())
    policy = ConductorPolicy(generator, prompts, EpisodeRunner(executor, (), max_steps=5),
                             SamplingSettings(0.0, 1.0, 160), max_rounds)
    return MethodContext(Roster.full(pool_config.workers), executor, 0, policy)


def run(context, names, tasks):
    return asyncio.run(Harness(concurrency=16).run(build_methods(names, context), tasks))


def test_the_conductors_workflow_runs_and_is_scored(orchestra):
    preset, oracle, _ = orchestra
    verify = shape_workflow("verify", [0, 1]).render()  # gemini solves, claude checks
    context = context_for(orchestra, ScriptedGenerator(["A plan.\n" + verify]))
    tasks = list(preset.tasks[:40])
    rows = run(context, ["conductor", "single:gemini-2.5-pro"], tasks)
    mine = [r for r in rows if r.method == "conductor"]
    assert all(r.workers == ("gemini-2.5-pro", "claude-sonnet-4") and r.access == ("[]", "all") for r in mine)
    assert all(r.worker_calls == 2 and r.conductor_tokens == 7 and r.parse_error is None for r in mine)
    single = {r.task_id: r.correct for r in rows if r.method == "single:gemini-2.5-pro"}
    for row in mine:  # a workflow is right only if one of its workers can solve the item
        assert not row.correct or single[row.task_id] or oracle.base_correct[("claude-sonnet-4", row.task_id)]


def test_an_unparsable_root_is_a_wrong_answer_that_keeps_the_reason(orchestra):
    preset, _, _ = orchestra
    context = context_for(orchestra, ScriptedGenerator(["I would ask model 9 = [oops"]))
    rows = run(context, ["conductor"], list(preset.tasks[:5]))
    assert all(r.correct is False and r.worker_calls == 0 and r.parse_error == "missing_list" for r in rows)
    truncated = context_for(orchestra, ScriptedGenerator([shape_workflow("solve", [0]).render()], "length"))
    cut = run(truncated, ["conductor"], list(preset.tasks[:3]))
    assert {r.parse_error for r in cut} == {"truncated"}
    stats = workflow_stats(rows + cut, lambda method: True)["conductor"]
    assert sum(d["questions"] for d in stats.values()) == 8
    for domain in stats.values():
        assert domain["parse_errors"] == 1 and sum(domain["parse_error_reasons"].values()) == pytest.approx(1)
    markdown = "\n".join(markdown_lines({"conductor": stats}))
    assert "missing_list" in markdown and "truncated" in markdown


def test_a_prompt_too_long_is_an_infrastructure_error(orchestra):
    preset, _, _ = orchestra
    context = context_for(orchestra, ScriptedGenerator([""], PROMPT_TOO_LONG))
    rows = run(context, ["conductor"], list(preset.tasks[:3]))
    assert all(r.correct is None and "max_model_len" in r.error for r in rows)


def test_recursion_accepts_or_replaces_the_answer(orchestra):
    preset, _, _ = orchestra
    solve = shape_workflow("solve", [4]).render()
    accept = "model_id = []\nsubtasks = []\naccess_list = []"
    tasks = list(preset.tasks[:6])
    accepted = run(context_for(orchestra, ScriptedGenerator([solve, accept] * 6 + [solve])),
                   ["conductor_recursive"], tasks[:1])
    assert accepted[0].rounds == 1 and accepted[0].worker_calls == 1 and accepted[0].conductor_tokens == 14
    replaced = run(context_for(orchestra, ScriptedGenerator([solve, shape_workflow("verify", [0, 2]).render()])),
                   ["conductor_recursive"], tasks[:1])
    assert replaced[0].rounds == 2 and replaced[0].workers == ("gemma-3-27b", "gemini-2.5-pro", "gpt-5")
    garbled = run(context_for(orchestra, ScriptedGenerator([solve, "no lists"])), ["conductor_recursive"], tasks[:1])
    assert garbled[0].parse_error == "recursive_turn:missing_list" and garbled[0].worker_calls == 1  # root stands
    [stats] = workflow_stats(garbled, is_conductor)["conductor_recursive"].values()
    assert stats["parse_errors"] == 0 and stats["recursive_turns_unparsed"] == 1 and stats["recursion"] == 0
    assert "| 0% (turn not a workflow: 100%) | 0% |" in "\n".join(markdown_lines({"conductor_recursive": {"d": stats}}))
    root_only = run(context_for(orchestra, ScriptedGenerator([solve])), ["conductor"], tasks[:1])
    assert root_only[0].rounds == 1 and root_only[0].conductor_tokens == 7


def test_conductor_methods_need_a_policy_and_take_no_worker(orchestra):
    preset, _, pool_config = orchestra
    bare = MethodContext(Roster.full(pool_config.workers), WorkflowExecutor(DirectPool(orchestra[1])), 0)
    with pytest.raises(ValueError, match="set evaluate.policy"):
        build_methods(["conductor"], bare)
    with pytest.raises(ValueError, match="no ':<worker>'"):
        build_methods(["conductor:gpt-5"], context_for(orchestra, ScriptedGenerator(["x"])))


def test_the_report_gives_the_conductors_workflow_statistics(orchestra, tmp_path):
    preset, _, _ = orchestra
    texts = [shape_workflow("verify", [0, 1]).render(), shape_workflow("solve", [2]).render()]
    context = context_for(orchestra, ScriptedGenerator(texts * 30))
    tasks = [t for t in preset.tasks if t.domain == "math500"][:10]
    tasks += [t for t in preset.tasks if t.domain == "mmlu"][:10]
    outcomes = run(context, ["conductor", "single", "moa"], tasks)
    write_report(tmp_path, outcomes, summarise(outcomes), {"title": "t"})
    report = json.loads((tmp_path / "report.json").read_text())
    stats = report["workflows"]["conductor"]
    assert set(stats) == {"math500", "mmlu"} and "single:gpt-5" not in report["workflows"]
    for domain in stats.values():
        assert 1 <= domain["steps"] <= 2 and sum(domain["steps_histogram"].values()) == 10
        assert set(domain["shapes"]) <= {"[] → all", "[]"} and domain["recursion"] == 0
    markdown = (tmp_path / "report.md").read_text()
    assert "## Workflows written by `conductor`" in markdown
    assert "## The Conductor against the best single worker of each domain" in markdown and "x |" in markdown


def test_batched_generator_gathers_concurrent_callers_into_one_engine_call():
    class CountingSampler:
        def __init__(self):
            self.batches = []

        def generate(self, prompts, n, sampling, version=0):
            self.batches.append(len(prompts))
            return [[Sample(p, [len(p)], [0.0], str(p[0]), "stop", version)] * n for p in prompts]

    sampler = CountingSampler()
    generator = BatchedGenerator(sampler, gather_s=0.01)
    greedy, hot = SamplingSettings(0.0), SamplingSettings(1.0)

    async def main():
        calls = [generator.generate([[i], [i + 100]], 1, greedy) for i in range(20)]
        calls += [generator.generate([[7]], 2, hot)]
        return await asyncio.gather(*calls)

    results = asyncio.run(main())
    assert sorted(sampler.batches) == [1, 40]  # one call per (n, sampling), every caller served from it
    for i, groups in enumerate(results[:20]):
        assert [g[0].text for g in groups] == [str(i), str(i + 100)]
    assert len(results[20][0]) == 2


def test_an_engine_failure_reaches_every_caller_of_the_batch():
    class Broken:
        def generate(self, prompts, n, sampling, version=0):
            raise RuntimeError("engine died")

    generator = BatchedGenerator(Broken())

    async def main():
        return await asyncio.gather(*(generator.generate([[1]], 1, SamplingSettings()) for _ in range(3)),
                                    return_exceptions=True)

    assert [str(e) for e in asyncio.run(main())] == ["engine died"] * 3


def test_the_paper_comparison_is_left_out_when_nothing_in_the_report_compares():
    cell = Cell(accuracy=0.8, se=0.02, n=50, worker_calls=1, worker_tokens=900, conductor_tokens=30, usd=0.01,
                latency_s=1.0, steps=1, infra_errors=0)
    row = {domain: cell for domain in (*DOMAINS, AVERAGE)}
    assert paper_comparison({"conductor": row}) == []
    section = paper_comparison({"conductor": row, "single:gpt-5": row, "moa": row})
    assert section[0].startswith("## Against the paper") and section[-1] == ""
    assert any(line.startswith("| best single worker |") for line in section)


def test_a_constrained_conductor_asks_for_the_workflow_expression(orchestra):
    """The root turn's expression admits no accept turn; a recursive turn's also admits three empty lists."""
    from conductor.workflow_constraint import matches

    class RecordingGenerator(ScriptedGenerator):
        async def generate(self, prompts, n, sampling):
            self.settings.append(sampling)
            return await super().generate(prompts, n, sampling)

    preset, _, _ = orchestra
    generator = RecordingGenerator([shape_workflow("solve", [1]).render(), "model_id = []\nsubtasks = []\n"
                                    "access_list = []"])
    generator.settings = []
    context = context_for(orchestra, generator, max_rounds=1)
    context.conductor.constrain_format = True
    rows = run(context, ["conductor_recursive"], list(preset.tasks[:1]))
    assert rows[0].parse_error is None
    root, turn = generator.settings
    accept = "model_id = []\nsubtasks = []\naccess_list = []"
    assert not matches(root.format_regex, accept) and matches(turn.format_regex, accept)
    assert matches(root.format_regex, shape_workflow("verify", [6, 0]).render())
    assert not matches(root.format_regex, shape_workflow("solve", [7]).render())  # paper-7 has 7 workers
