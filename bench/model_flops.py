"""Model FLOPs of the learner's GRPO step and the peak that model FLOPs utilisation (MFU) divides by.

Counted on the work the shared-prompt forward (learner/shared_prompt.py) really does in a micro-batch:
each distinct prompt runs once (U prompts of length P_u), each row's completion once (B rows of length C_b).
Padding is not counted. With d the hidden size, L layers, h heads of size d_h, V the vocabulary and
N_body the parameters outside the embedding and the output head:

    forward = 2 * N_body * T  +  2 * V * d * S  +  4 * L * h * d_h * K
        T = sum_u P_u + sum_b C_b                           tokens run through the layers
        S = U * (distinct prompt lengths) + sum_b C_b       positions whose logits are computed
        K = sum_u P_u (P_u + 1) / 2 + sum_b (C_b P_b + C_b (C_b + 1) / 2)   query-key pairs (causal)
    step = forward * (3 + 1 if the step has several mini-batches)

3: forward and backward (twice the forward); + 1: the no-grad forward that fixes the old logprobs before
the first of several updates. MFU = step FLOPs / step seconds / peak. The usual 6 * N * tokens counts
every token of every sequence; it would credit the shared prompt's skipped work as done.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

# Dense bf16 tensor-core peaks from NVIDIA's data sheets (their "with sparsity" figures halved), TFLOP/s.
# Matched in this order against torch.cuda.get_device_name().
BF16_PEAK_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.5),
    ("H100 NVL", 835.5),
    ("H100 PCIe", 756.5),
    ("H100", 989.5),   # SXM5 (HBM3)
    ("A100", 312.0),
)


def peak_tflops(device_name: str) -> Optional[float]:
    """The dense bf16 peak of a known GPU, or None."""
    for needle, tflops in BF16_PEAK_TFLOPS:
        if needle in device_name:
            return tflops
    return None


def body_parameters(model: Any) -> int:
    """Parameters outside the input embedding and the output head (which ``forward_flops`` counts apart)."""
    embeddings = {id(model.get_input_embeddings().weight), id(model.get_output_embeddings().weight)}
    return sum(p.numel() for p in model.parameters() if id(p) not in embeddings)


def forward_flops(config: Any, n_body: int, micro_batches: Sequence[Sequence[Any]]) -> float:
    """One forward of every micro-batch (lists of ``TrainSequence``), as the shared-prompt forward runs it."""
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    total = 0.0
    for micro in micro_batches:
        prompts = {tuple(s.prompt_ids) for s in micro}
        completions = [len(s.completion_ids) for s in micro]
        tokens = sum(len(p) for p in prompts) + sum(completions)
        scored = len(prompts) * len({len(p) for p in prompts}) + sum(completions)
        pairs = sum(len(p) * (len(p) + 1) / 2 for p in prompts)
        pairs += sum(c * len(s.prompt_ids) + c * (c + 1) / 2 for s, c in zip(micro, completions))
        total += 2 * n_body * tokens + 2 * config.vocab_size * hidden * scored + 4 * layers * heads * head_dim * pairs
    return total


def step_flops(config: Any, n_body: int, micro_batches: Sequence[Sequence[Any]], mini_batches: int) -> float:
    return forward_flops(config, n_body, micro_batches) * (3 + (1 if mini_batches > 1 else 0))
