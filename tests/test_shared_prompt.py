"""The shared-prompt forward equals the plain forward: the same completion logprobs and the same
gradient, for groups that share prompts of different lengths, completions of different lengths, and
both model families the project meets (Qwen2: the tiny policy; Llama: SmolLM2)."""

import random

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

from learner.grpo import GrpoSettings, policy_loss
from learner.shared_prompt import collate_shared, shared_prompt_logprobs
from learner.train_batch import TrainSequence, collate, token_logprobs

SMALL = dict(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=256, pad_token_id=0)


def model_of(kind: str):
    torch.manual_seed(0)
    config = Qwen2Config(**SMALL) if kind == "qwen2" else LlamaConfig(**SMALL)
    config._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(config).float()


def groups(rng: random.Random, count: int = 3, size: int = 4, untrained: bool = False) -> list[TrainSequence]:
    """``untrained``: each completion's opening tokens (a plan line, with ``learner.train_plan_line`` off)
    kept out of the loss; later tokens still see them."""
    sequences = []
    for _ in range(count):
        prompt = tuple(rng.randrange(1, 97) for _ in range(rng.randint(5, 30)))
        for _ in range(size):
            completion = tuple(rng.randrange(1, 97) for _ in range(rng.randint(1, 12)))
            kept_out = tuple(range(min(3, len(completion) - 1))) if untrained else ()
            sequences.append(TrainSequence(prompt, completion, tuple(-rng.random() for _ in completion),
                                           rng.uniform(-1, 1), untrained=kept_out))
    rng.shuffle(sequences)  # a micro-batch's rows need not arrive grouped
    return sequences


def plain(model, sequences):
    batch = collate(sequences, pad_id=0)
    logprobs = token_logprobs(model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits,
                              batch.input_ids)
    per_row = [logprobs[row][batch.completion_mask[row] > 0] for row in range(len(sequences))]
    loss, _ = policy_loss(logprobs, logprobs.detach(), batch.advantages, batch.completion_mask, GrpoSettings(),
                          behaviour_logprobs=batch.behaviour_logprobs)
    return per_row, loss


def shared(model, sequences):
    batch = collate_shared(sequences, pad_id=0)
    logprobs = shared_prompt_logprobs(model, batch)
    per_row = [logprobs[row][batch.completion_mask[row] > 0] for row in range(len(sequences))]
    loss, _ = policy_loss(logprobs, logprobs.detach(), batch.advantages, batch.completion_mask, GrpoSettings(),
                          behaviour_logprobs=batch.behaviour_logprobs)
    return per_row, loss


def gradient(model, loss):
    model.zero_grad()
    loss.backward()
    return {name: p.grad.clone() for name, p in model.named_parameters()}


@pytest.mark.parametrize("kind, untrained", [("qwen2", False), ("llama", False), ("qwen2", True)])
def test_shared_prompt_forward_gives_the_plain_logprobs_and_gradient(kind, untrained):
    """With tokens kept out of the loss too: the completion's attention once used the loss's mask, so the
    worker ids were scored as if the plan line before them were not there."""
    model = model_of(kind)
    sequences = groups(random.Random(kind), untrained=untrained)
    expected_rows, expected_loss = plain(model, sequences)
    expected_grad = gradient(model, expected_loss)
    got_rows, got_loss = shared(model, sequences)
    got_grad = gradient(model, got_loss)
    for expected, got in zip(expected_rows, got_rows):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_loss, expected_loss, atol=1e-6, rtol=1e-5)
    for name, grad in expected_grad.items():
        torch.testing.assert_close(got_grad[name], grad, atol=1e-6, rtol=1e-4, msg=name)
    assert any(g.abs().sum() > 0 for g in got_grad.values())


def test_each_distinct_prompt_runs_once():
    sequences = groups(random.Random(1), count=3, size=5)
    batch = collate_shared(sequences, pad_id=0)
    assert batch.prompt_ids.shape[0] == 3 and batch.completion_ids.shape[0] == 15
    for row, s in enumerate(sequences):
        prompt = batch.prompt_ids[batch.row_prompt[row]][batch.prompt_mask[batch.row_prompt[row]] > 0]
        assert tuple(prompt.tolist()) == s.prompt_ids
        assert tuple(batch.completion_ids[row][batch.completion_mask[row] > 0].tolist()) == s.completion_ids
