"""Build a tiny Conductor policy offline: a byte-level BPE tokenizer trained on the text the policy will
read and write, with a ChatML template, and a randomly initialised Qwen2 model (untied embeddings, so a
weight update always carries ``lm_head``). Saved as a Hugging Face directory that transformers and vLLM
both load; nothing is fetched from a hub.

Defaults follow the measured prototype: hidden 64, 2 layers, 2 heads x head_dim 32 (vLLM's CPU
attention rejects head_dim 16), FFN 256, vocab 768, fp32.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


@dataclass(frozen=True)
class TinyPolicySpec:
    vocab_size: int = 768
    hidden_size: int = 64
    layers: int = 2
    heads: int = 2
    kv_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 256
    max_positions: int = 4096
    seed: int = 0


def default_corpus() -> list[str]:
    """Text like what the policy sees and writes: prompts, few-shot workflows, toy questions."""
    from conductor.prompts import FORMAT, ROLE, SEMANTICS, load_fewshot
    from conductor.tasks.toy import toy_tasks

    lines = [ROLE.format(max_steps=5), SEMANTICS, FORMAT]
    lines += [e.response for e in load_fewshot(limit=32)]
    lines += [t.prompt for t in toy_tasks(200, seed=12345)]
    lines += [f"Model {i}: a model that is strong at {what}" for i in range(8)
              for what in ("arithmetic", "spelling words backwards", "sorting numbers")]
    lines += [f"model_id = [{i}]\nsubtasks = [\"Solve the question.\"]\naccess_list = [[]]" for i in range(8)]
    return lines


def build_tokenizer(corpus: Iterable[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator(list(corpus), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token=None, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", unk_token=None, chat_template=CHAT_TEMPLATE)


def build_tiny_policy(out_dir: str | Path, spec: TinyPolicySpec = TinyPolicySpec(),
                      corpus: Iterable[str] | None = None) -> Path:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(corpus if corpus is not None else default_corpus(), spec.vocab_size)
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=spec.hidden_size, num_hidden_layers=spec.layers,
        num_attention_heads=spec.heads, num_key_value_heads=spec.kv_heads, head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size, max_position_embeddings=spec.max_positions,
        tie_word_embeddings=False, torch_dtype="float32", bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"))
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config).to(torch.float32)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    return out
