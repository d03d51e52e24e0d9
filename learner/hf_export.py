"""Export the learner's policy as a Hugging Face model directory that ``vllm serve`` and transformers load.

Parameters are gathered bucket by bucket (under ZeRO-3 a collective: every rank calls this) and rank 0
writes one safetensors shard per bucket plus the index, so the full model is never held twice. The
config, generation config and tokenizer files are copied alongside.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Optional

import torch

# The tokenizer and generation defaults the policy was built with.
COPIED_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                "merges.txt", "chat_template.jinja", "generation_config.json")


def export_hf(module: torch.nn.Module, model_config: Any, directory: str, rank: int, zero3: bool,
              bucket_bytes: int, tokenizer_from: Optional[str] = None) -> Optional[str]:
    from safetensors.torch import save_file

    from conductor.weight_transfer import bucket_plan, spec_nbytes
    from learner.weight_sync import gathered_buckets, parameter_specs

    specs = parameter_specs(module)
    count = len(bucket_plan(specs, bucket_bytes))
    out = Path(directory)
    if rank == 0:
        out.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    for index, bucket in enumerate(gathered_buckets(module, specs, bucket_bytes, zero3)):
        if rank != 0:
            continue
        shard = f"model-{index + 1:05d}-of-{count:05d}.safetensors"
        save_file({name: tensor.detach().contiguous().cpu() for name, tensor in bucket}, str(out / shard),
                  metadata={"format": "pt"})
        weight_map.update({name: shard for name, _ in bucket})
    if rank != 0:
        return None
    total = sum(spec_nbytes(spec) for spec in specs)
    (out / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    model_config.save_pretrained(out)
    if tokenizer_from:
        for name in COPIED_FILES:
            source = Path(tokenizer_from, name)
            if source.exists():
                shutil.copy2(source, out / name)
    return str(out)

