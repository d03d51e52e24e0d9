"""The evaluation entry point end to end: cluster.evaluate over the real simulator server (HTTP, the
official client inside the pool), a few questions per domain, every non-conductor method; then the full
paper-7 calibration of the baselines against the paper, in-process."""

import asyncio
import json
import statistics
from collections import defaultdict

import pyarrow.parquet as pq
import pytest
from rich.console import Console

from cluster.evaluate import main as evaluate_main
from cluster.evaluate import run
from conductor.baselines import SOLVE_ALONE
from conductor.config import FaultRates, SimulatorConfig
from conductor.config_loader import load_config
from conductor.evaluation import fixed_methods
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.paper_reference import PAPER, SELF_REFLECTION_GAIN, TOLERANCE
from conductor.evaluation.registry import build_methods
from conductor.evaluation.report import AVERAGE, summarise
from conductor.executor import WorkflowExecutor
from conductor.roster import Roster
from conductor.simulator.oracle import Oracle
from conductor.simulator.preset_file import read_preset_file
from conductor.simulator.presets import load_preset, simulated_pool_config
from conductor.simulator.roles import Role, classify
from conductor.simulator.server import SimulatorServer
from tests.support.direct_pool import DirectPool

PER_DOMAIN = 6


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, shared_data):
    out = tmp_path_factory.mktemp("eval")
    argv = ["--config", "configs/eval-paper7.yaml", "--set", f"output.dir={out}", "--set", "run_name=t",
            "--set", f"simulator.data_dir={shared_data}", "--set", f"evaluate.questions_per_domain={PER_DOMAIN}",
            "--set", "simulator.latency_scale=0", "--set", "evaluate.repeats=2",
            "--set", "evaluate.methods=[single,oracle,random,self_reflection:gpt-5,consensus:gemini-2.5-pro,moa,"
            "solve_check:gemini-2.5-pro>claude-sonnet-4]"]
    assert evaluate_main(argv) == 0
    run = out / "t"
    rows = pq.read_table(run / "outcomes.parquet").to_pylist()
    return run, rows


def test_the_report_files_are_written(evaluated):
    run, rows = evaluated
    report = json.loads((run / "report.json").read_text())
    for name in ("oracle", "moa", "random", "single:gpt-5", "self_reflection:gpt-5", "consensus:gemini-2.5-pro"):
        for domain in ("math500", "mmlu", "code", AVERAGE):
            cell = report["methods"][name][domain]
            for key in ("accuracy", "se", "n", "worker_calls", "worker_tokens", "conductor_tokens", "usd"):
                assert key in cell
            assert 0 <= cell["accuracy"] <= 1
    assert report["methods"]["moa"]["math500"]["n"] == PER_DOMAIN
    markdown = (run / "report.md").read_text()
    assert "| moa |" in markdown and "python -m cluster.evaluate" in markdown
    for png in ("accuracy_cost.png", "steps_by_domain.png"):
        assert (run / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in markdown  # the table shows its figures
    methods = {r["method"] for r in rows}
    assert len(rows) == len(methods) * 3 * PER_DOMAIN * 2  # every method, question and repeat, oracle included


def test_each_method_makes_the_calls_its_design_says(evaluated):
    _, rows = evaluated
    by_method = defaultdict(list)
    for row in rows:
        by_method[row["method"].partition(":")[0]].append(row)
    assert {r["worker_calls"] for r in by_method["moa"]} == {8}
    assert all(r["access"][-1] == "all" and len(set(r["workers"][:7])) == 7 for r in by_method["moa"])
    assert {r["worker_calls"] for r in by_method["self_reflection"]} == {5}
    assert {r["worker_calls"] for r in by_method["consensus"]} == {5}
    assert {r["worker_calls"] for r in by_method["single"]} == {1}
    checked = by_method["solve_check"]  # the solver alone, then the checker seeing its answer
    assert checked and {r["worker_calls"] for r in checked} == {2}
    assert all(r["workers"] == ["gemini-2.5-pro", "claude-sonnet-4"] and r["access"] == ["[]", "all"] for r in checked)
    # the simulator reads the checker's subtask as a check, not a second solve (conductor/simulator/roles.py)
    assert classify(fixed_methods.CHECK, visible_answers=1) is Role.VERIFY
    assert classify(SOLVE_ALONE, visible_answers=0) is Role.SOLVE
    assert {r["worker_calls"] for r in by_method["oracle"]} == {7}
    assert all(r["usd"] > 0 and r["worker_prompt_tokens"] > 0 and r["correct"] is not None for r in rows)
    aggregators = {r["workers"][-1] for r in by_method["moa"]}
    assert len(aggregators) > 1  # drawn at random per question and repeat


def test_single_workers_and_the_oracle_score_what_the_simulator_decides(evaluated, shared_data):
    _, rows = evaluated
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=600)
    oracle = Oracle(load_preset(config), config)
    singles = defaultdict(list)
    for row in rows:
        if row["method"].startswith("single:"):
            worker = row["method"].partition(":")[2]
            assert row["correct"] == oracle.base_correct[(worker, row["task_id"])]  # checked by the real verifier
            singles[(row["task_id"], row["repeat"])].append(row["correct"])
    for row in rows:
        if row["method"] == "oracle":
            assert row["correct"] == any(singles[(row["task_id"], row["repeat"])])


def test_earlier_outcomes_are_reused_not_run_again(evaluated, tmp_path, capsys):
    run_dir, rows = evaluated
    base = ["--config", "configs/eval-paper7.yaml", "--set", f"output.dir={tmp_path}", "--set", "run_name=r",
            "--set", "evaluate.repeats=2", "--set", "simulator.latency_scale=0",
            "--set", f"evaluate.reuse=[{run_dir / 'outcomes.parquet'}]"]
    # a faulty pool proves nothing reused is asked again: every call would fail
    assert evaluate_main(base + ["--set", f"evaluate.questions_per_domain={PER_DOMAIN}", "--set",
                                 "simulator.faults.server_error=1.0", "--set", "evaluate.methods=[oracle,moa]"]) == 0
    reused = pq.read_table(tmp_path / "r" / "outcomes.parquet").to_pylist()
    key = lambda r: (r["method"], r["task_id"], r["repeat"])  # noqa: E731
    assert {key(r): r["correct"] for r in reused} == {key(r): r["correct"] for r in rows}
    assert "reused from earlier evaluations" in capsys.readouterr().out
    # a later report that reuses it and names only another method keeps the oracle row it held
    again = [*base[:-1], f"evaluate.reuse=[{tmp_path / 'r' / 'outcomes.parquet'}]", "--set", "run_name=r2"]
    assert evaluate_main(again + ["--set", f"evaluate.questions_per_domain={PER_DOMAIN}", "--set",
                                  "simulator.faults.server_error=1.0", "--set", "evaluate.methods=[moa]"]) == 0
    kept = pq.read_table(tmp_path / "r2" / "outcomes.parquet").to_pylist()
    assert {key(r): r["correct"] for r in kept if r["method"] == "oracle"} == {
        key(r): r["correct"] for r in rows if r["method"] == "oracle"} != {}
    assert evaluate_main(base + ["--set", f"evaluate.questions_per_domain={PER_DOMAIN + 1}"]) == 2
    assert "evaluate it on the same questions" in capsys.readouterr().err
    # outcomes made under another pool are refused, not reported beside these as if comparable
    assert evaluate_main(base + ["--set", f"evaluate.questions_per_domain={PER_DOMAIN}", "--set", "seed=1",
                                 "--set", "evaluate.methods=[oracle,moa]"]) == 2
    assert "were evaluated with another pool, simulator, seed" in capsys.readouterr().err


@pytest.mark.parametrize("methods, message", [("[single,nonsense]", "evaluate.methods.1: Value error, unknown method "
                                                                    "'nonsense'; known: single, self_reflection"),
                                              ("[solve_check:gpt-5]", "evaluate.methods.0: Value error, method "
                                                                      "'solve_check' takes two workers in order"),
                                              ("[single:gpt-6]", "no worker 'gpt-6'"),
                                              ("[solve_check:gpt-5>gpt-6]", "no worker 'gpt-6'")])
def test_a_bad_method_name_is_a_clear_error(methods, message, capsys, tmp_path):
    """A name the registry does not know, or of the wrong form, fails the config naming the setting; a worker
    not in the pool fails once the pool is known."""
    argv = ["--config", "configs/eval-paper7.yaml", "--set", f"output.dir={tmp_path}",
            "--set", f"evaluate.methods={methods}", "--set", "evaluate.questions_per_domain=1"]
    try:
        code = evaluate_main(argv)
    except SystemExit as stop:  # the config's errors end argparse's way
        code = stop.code
    assert code == 2 and message in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_failing_workers_are_infrastructure_errors_not_wrong_answers(tmp_path, shared_data):
    sim_config = SimulatorConfig(preset="paper-7", port=0, latency_scale=0, data_dir=str(shared_data),
                                 faults=FaultRates(server_error=0.3))
    with SimulatorServer(sim_config) as sim:
        pool = simulated_pool_config(sim.state.preset, sim.base_url, max_retries=0)
        config = load_config("configs/eval-paper7.yaml", [f"output.dir={tmp_path}", "run_name=f",
                                                          "evaluate.questions_per_domain=5",
                                                          "evaluate.methods=[single:gpt-5,moa]"])
        run(config.model_copy(update={"pool": pool, "simulator": sim_config}), Console(width=200))
    rows = pq.read_table(tmp_path / "f" / "outcomes.parquet").to_pylist()
    failed = [r for r in rows if r["correct"] is None]
    assert failed and all(r["error"] for r in failed)
    assert any(r["correct"] is not None for r in rows)
    report = json.loads((tmp_path / "f" / "report.json").read_text())
    assert report["methods"]["moa"][AVERAGE]["infra_errors"] == sum(r["method"] == "moa" for r in failed)


@pytest.mark.slow
def test_paper7_baselines_reproduce_the_papers_table(shared_data):
    """Full size (500 MATH, 600 MMLU, 164 code items), in-process: the best single worker of each domain,
    MoA within 3 points of the paper, and the best self-reflection's gain within 3 points of the paper's."""
    config = SimulatorConfig(preset="paper-7", data_dir=str(shared_data), mmlu_items=600)
    preset = load_preset(config)
    roster = Roster.full(simulated_pool_config(preset, "http://127.0.0.1:9/v1").workers)
    context = MethodContext(roster, WorkflowExecutor(DirectPool(Oracle(preset, config))), seed=0)
    methods = build_methods(["single", "moa", "self_reflection:gemini-2.5-pro", "self_reflection:gpt-5"], context)
    table = summarise(asyncio.run(Harness(concurrency=64).run(methods, list(preset.tasks))))
    for worker in read_preset_file("paper-7").workers:
        cells = table[f"single:{worker.name}"]
        for domain, target in worker.accuracy_percent.items():
            assert abs(100 * cells[domain].accuracy - target) <= max(0.5, 100 * cells[domain].se)
    for domain, target in PAPER["moa"].items():
        assert abs(100 * table["moa"][domain].accuracy - target) <= TOLERANCE, (domain, table["moa"][domain])
    gains = [table[f"self_reflection:{w}"][AVERAGE].accuracy - table[f"single:{w}"][AVERAGE].accuracy
             for w in ("gemini-2.5-pro", "gpt-5")]
    assert abs(100 * max(gains) - SELF_REFLECTION_GAIN) <= TOLERANCE
    moa_tokens = statistics.fmean(table["moa"][d].worker_tokens for d in ("math500", "mmlu", "code"))
    assert 8_000 <= moa_tokens <= 14_000  # the paper's MoA: 11,203 tokens per question


def test_the_unseen_types_are_scored_with_the_per_domain_table_beside(tmp_path, shared_data, capsys):
    prior = tmp_path / "workflow_prior.json"  # a measured menu's shape: every worker alone, the heaviest a pair
    workers = [w.name for w in read_preset_file("paper-7").workers]
    menu = {"code": {"gpt-5": 0.8}, "math500": {"gemini-2.5-pro>claude-sonnet-4": 0.7},
            "mmlu": {"claude-sonnet-4>gemini-2.5-pro": 0.7}}
    prior.write_text(json.dumps({domain: {**{w: 0.01 * (1 + (w == "gpt-5")) for w in workers}, **items}
                                 for domain, items in menu.items()}))
    argv = ["--config", "configs/train-paper7.yaml", "--set", f"output.dir={tmp_path}", "--set", "run_name=u",
            "--set", f"simulator.data_dir={shared_data}", "--set", "simulator.latency_scale=0",
            "--set", "evaluate.split=unseen", "--set", "evaluate.questions_per_domain=2",
            "--set", "evaluate.methods=[single,oracle,domain_table]", "--set", f"evaluate.domain_table={prior}"]
    assert evaluate_main(argv) == 0
    report = json.loads((tmp_path / "u" / "report.json").read_text())
    methods = report["methods"]
    assert {"oracle", "domain_table", "solve_check:gemini-2.5-pro>claude-sonnet-4", "single:gpt-5"} <= set(methods)
    assert set(methods["domain_table"]) == {"aime", "mbpp", "physchem", AVERAGE}
    assert report["meta"]["domain_table"]["generalist"] == "single:gpt-5"
    assert {c["how"] for c in report["meta"]["domain_table"]["chosen"].values()} == {
        "best fallback, chosen on these items"}
    assert report["meta"]["unseen_calibration"]["gpt-5"]["mbpp"] == pytest.approx(0.358)
    markdown = (tmp_path / "u" / "report.md").read_text()
    for section in ("## Task types nothing trained on", "### Calibration", "### Per type", "### The per-domain table",
                    "optimistic upper bound"):
        assert section in markdown
    # read back, the derived rows are recomputed from the rows they copy (a faulty pool: nothing is asked again)
    again = argv[:-4] + ["--set", "run_name=v", "--set", "simulator.faults.server_error=1.0",
                         "--set", f"evaluate.reuse=[{tmp_path / 'u' / 'outcomes.parquet'}]",
                         "--set", "evaluate.methods=[oracle,domain_table]", "--set", f"evaluate.domain_table={prior}"]
    assert evaluate_main(again) == 0
    reread = json.loads((tmp_path / "v" / "report.json").read_text())["methods"]
    assert reread["domain_table"] == methods["domain_table"] and reread["oracle"] == methods["oracle"]
    assert evaluate_main(argv[:-4] + ["--set", "evaluate.methods=[domain_table]"]) == 2
    assert "needs its table" in capsys.readouterr().err
    toy = ["--config", "configs/train-toy.yaml", "--set", f"output.dir={tmp_path}", "--set", "evaluate.split=unseen"]
    assert evaluate_main(toy) == 2
    assert "unseen task types" in capsys.readouterr().err


def test_scored_on_the_train_split_the_routers_get_nothing_to_learn_from_and_refuse(shared_data):
    """They learnt on the very questions they were scored on, and nothing said so."""
    from cluster.evaluate import questions_for
    from conductor.config_loader import load_config

    config = load_config("configs/eval-paper7.yaml", [f"simulator.data_dir={shared_data}",
                                                             "evaluate.split=train"])
    scored, learns_from = questions_for(config)
    assert scored and learns_from == []
    heldout, train = questions_for(config.model_copy(update={"evaluate": config.evaluate.model_copy(
        update={"split": "heldout"})}))
    assert train and not {t.id for t in heldout} & {t.id for t in train}


def test_a_policy_is_scored_only_on_questions_its_run_held_out(tmp_path):
    """The splits are recomputed from the evaluation's config: one that differs from the training run's
    (another split_seed, fewer validation questions) scored the policy on questions it trained on."""
    from cluster.evaluate import check_held_out_from_policy
    from conductor.config_loader import load_config
    from conductor.tasks.task import Task

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "summary.json").write_text(json.dumps({"heldout_question_ids": ["a/1", "a/2"]}))
    config = load_config("configs/train-toy.yaml", [f"evaluate.policy={tmp_path / 'run' / 'policy'}",
                                                    "evaluate.split=heldout"])
    asked = [Task(id=i, domain="a", prompt="q", answer="1", verifier="exact") for i in ("a/1", "a/2")]
    check_held_out_from_policy(config, asked)
    with pytest.raises(ValueError, match=r"1 of the 3 questions scored \(e\.g\. 'a/3'\) were not held out"):
        check_held_out_from_policy(config, [*asked, Task(id="a/3", domain="a", prompt="q", answer="1",
                                                         verifier="exact")])
