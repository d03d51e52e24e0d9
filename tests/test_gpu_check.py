"""bench/gpu_check.py: its model FLOPs, what it needs on the device machine, and the whole check on the CPU
(the device side in bfloat16 on the CPU against the float32 reference: the same code as on a GPU but the
accelerator, NCCL and the timing's synchronisation)."""

import json
import shutil

import pytest

from bench import gpu_check
from bench.gpu_check_bundle import wanted
from bench.model_flops import forward_flops, peak_tflops, step_flops
from learner.train_batch import TrainSequence


class Shape:
    hidden_size, num_hidden_layers, num_attention_heads, head_dim, vocab_size = 8, 2, 2, 4, 100


def row(prompt, completion_length):
    return TrainSequence(tuple(prompt), tuple(range(completion_length)), (0.0,) * completion_length, 1.0)


def test_peaks_are_the_dense_bf16_figures_of_the_named_card():
    assert peak_tflops("NVIDIA H100 80GB HBM3") == 989.5
    assert peak_tflops("NVIDIA H200") == 989.5
    assert peak_tflops("NVIDIA H100 PCIe") == 756.5
    assert peak_tflops("NVIDIA GeForce RTX 4090") is None


def test_forward_flops_count_a_shared_prompt_once_and_attention_causally():
    n_body = 1000
    shared = forward_flops(Shape, n_body, [[row([1, 2, 3], 2), row([1, 2, 3], 2)]])
    # tokens 3 + 2 + 2; scored positions 1 + 2 + 2; query-key pairs 6 + 2 * (2 * 3 + 3)
    linear, head, attention = 2 * n_body * 7, 2 * 100 * 8 * 5, 4 * 2 * 2 * 4 * (6 + 2 * 9)
    assert shared == linear + head + attention
    apart = forward_flops(Shape, n_body, [[row([1, 2, 3], 2), row([4, 5, 6], 2)]])
    assert apart - shared == 2 * n_body * 3 + 2 * 100 * 8 * 1 + 4 * 2 * 2 * 4 * 6  # the second prompt's own run
    micro = [[row([1, 2, 3], 2)]]
    assert step_flops(Shape, n_body, micro, 2) == 4 * forward_flops(Shape, n_body, micro)
    assert step_flops(Shape, n_body, micro, 1) == 3 * forward_flops(Shape, n_body, micro)


def test_the_bundle_holds_what_the_check_needs_beyond_torch():
    bundle = wanted()
    assert {"deepspeed", "pydantic", "pydantic-core", "hjson", "transformers", "openai"} <= set(bundle)
    assert not {"torch", "numpy", "pyarrow", "sympy", "filelock"} & set(bundle)


def test_a_missing_module_without_wheels_stops_the_check_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_check, "NEEDED_MODULES", ("json", "no_such_module_gpu_check"))
    with pytest.raises(SystemExit, match=r"no_such_module_gpu_check.*gpu_check_bundle"):
        gpu_check.ensure_packages(tmp_path / "bundle")


@pytest.mark.slow
def test_the_check_passes_on_the_cpu_with_weights_drawn_from_a_config(tmp_path):
    from transformers import AutoModelForCausalLM

    from learner.tiny_policy import build_tiny_policy

    built = build_tiny_policy(tmp_path / "tiny")
    shape = tmp_path / "shape"   # the bundle's form: configuration and tokenizer, no weights
    shutil.copytree(built, shape, ignore=shutil.ignore_patterns("*.safetensors"))
    out = tmp_path / "out"
    code = gpu_check.main(["--device", "cpu", "--policy", str(shape), "--no-install", "--out", str(out),
                           "--scratch", str(tmp_path / "scratch"),
                           "--compare", "2", "4", "16", "8", "--speed", "2", "4", "16", "8", "--steps", "1",
                           "--warmup", "0", "--micro-batch-size", "4", "--lr", "1e-3"])
    summary = json.loads((out / "gpu_check.json").read_text())
    assert code == 0 and summary["passed"], summary["checks"]
    assert "weights drawn from seed 0" in summary["policy"]
    assert len(summary["checks"]) == 8 and all(ok for *_, ok in summary["checks"])
    assert summary["reference_step"]["grad_norm"] > 0 and summary["speed"]["step_flops"] > 0
    exported = AutoModelForCausalLM.from_pretrained(summary["export"]["path"])
    assert sum(p.numel() for p in exported.parameters()) == sum(
        p.numel() for p in AutoModelForCausalLM.from_pretrained(built).parameters())
    assert "| check | measured | bound |" in (out / "gpu_check.md").read_text()
