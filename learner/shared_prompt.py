"""Shared-prompt forward: the samples of a GRPO group share one prompt, so the prompt runs once.

A toy step is 8 groups x 8 samples of a ~540-token prompt and a ~45-token completion. A plain forward
runs 64 x ~585 tokens, and 92% of them are the same 8 prompts again; a conductor's real prompt (the
question, the worker roster, the format) is just as long next to its short workflow. Here each distinct
prompt of a micro-batch runs once, with gradients. Its keys and values are then indexed out to the rows
that continue it (``Cache.reorder_cache``, differentiable), and the completions run against that cache.

This is exact: a causal model's prompt states do not depend on what follows them, so the logprobs and
the gradient equal the plain forward's (``tests/test_shared_prompt.py`` checks both). Work drops from
B·(P+C) tokens to U·P + B·C, with U distinct prompts, and attention from (P+C)² to P² + C·(P+C) per row.

Layout: prompts and completions are each right-padded. The first completion token is scored by the
logits at its prompt's last real token; the rest by the completion forward's own logits. Position ids
count real tokens, so a completion continues at its own prompt's length whatever the padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from learner.train_batch import TrainSequence


@dataclass
class SharedPromptBatch:
    prompt_ids: torch.Tensor          # [U, P] long: each distinct prompt once, right-padded
    prompt_mask: torch.Tensor         # [U, P] long
    row_prompt: torch.Tensor          # [B] long: the prompt row b continues
    completion_ids: torch.Tensor      # [B, C] long, right-padded
    completion_mask: torch.Tensor     # [B, C] float: 1 on completion tokens the loss trains
    completion_attention: torch.Tensor  # [B, C] long: 1 on every completion token (what later tokens see)
    behaviour_logprobs: torch.Tensor  # [B, C] float, 0 outside the mask
    advantages: torch.Tensor          # [B] float
    worker_choice_mask: torch.Tensor  # [B, C] float: 1 on tokens that name a worker
    later_worker_mask: torch.Tensor   # [B, C] float: 1 on tokens that name a worker after the first


def collate_shared(sequences: Sequence[TrainSequence], pad_id: int) -> SharedPromptBatch:
    prompts: dict[tuple[int, ...], int] = {}
    row_prompt = [prompts.setdefault(s.prompt_ids, len(prompts)) for s in sequences]
    unique = list(prompts)
    prompt_width = max(len(p) for p in unique)
    prompt_ids = torch.full((len(unique), prompt_width), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(unique), prompt_width), dtype=torch.long)
    for row, prompt in enumerate(unique):
        prompt_ids[row, :len(prompt)] = torch.tensor(prompt)
        prompt_mask[row, :len(prompt)] = 1
    width = max(len(s.completion_ids) for s in sequences)
    completion_ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(sequences), width), dtype=torch.float32)
    completion_attention = torch.zeros((len(sequences), width), dtype=torch.long)
    behaviour = torch.zeros((len(sequences), width), dtype=torch.float32)
    choice = torch.zeros((len(sequences), width), dtype=torch.float32)
    later = torch.zeros((len(sequences), width), dtype=torch.float32)
    for row, s in enumerate(sequences):
        length = len(s.completion_ids)
        completion_ids[row, :length] = torch.tensor(s.completion_ids)
        completion_mask[row, :length] = 1.0
        completion_attention[row, :length] = 1
        behaviour[row, :length] = torch.tensor(s.behaviour_logprobs)
        choice[row, list(s.worker_choice)] = 1.0
        later[row, list(s.later_workers)] = 1.0
        completion_mask[row, list(s.untrained)] = 0.0
    return SharedPromptBatch(prompt_ids=prompt_ids, prompt_mask=prompt_mask,
                             row_prompt=torch.tensor(row_prompt, dtype=torch.long),
                             completion_ids=completion_ids, completion_mask=completion_mask,
                             completion_attention=completion_attention, behaviour_logprobs=behaviour,
                             advantages=torch.tensor([s.advantage for s in sequences], dtype=torch.float32),
                             worker_choice_mask=choice, later_worker_mask=later)


def shared_prompt_logprobs(module, batch: SharedPromptBatch) -> torch.Tensor:
    """log p(completion token j | prompt, completion[:j]) for every row and j: [B, C], float32.
    ``module``: a Hugging Face causal LM, or a DeepSpeed engine wrapping one."""
    prompt_lengths = batch.prompt_mask.sum(-1)
    last = torch.unique(prompt_lengths - 1)  # only the last prompt tokens' logits: [U, len(last), V], not [U, P, V]
    prompt_out = module(input_ids=batch.prompt_ids, attention_mask=batch.prompt_mask, use_cache=True,
                        logits_to_keep=last)
    cache = prompt_out.past_key_values
    cache.reorder_cache(batch.row_prompt)  # [U] -> [B] rows, through index_select: gradients flow back
    column = torch.searchsorted(last, prompt_lengths - 1)
    first_logits = prompt_out.logits[batch.row_prompt, column[batch.row_prompt]]  # [B, V]
    width = batch.completion_ids.shape[1]
    offsets = torch.arange(width, device=prompt_lengths.device)
    positions = prompt_lengths[batch.row_prompt].unsqueeze(1) + offsets.unsqueeze(0)
    # every real token is seen, trained or not (the engine sampled with the plan line in view)
    attention = torch.cat([batch.prompt_mask[batch.row_prompt], batch.completion_attention], dim=1)
    out = module(input_ids=batch.completion_ids, attention_mask=attention, position_ids=positions,
                 past_key_values=cache, use_cache=True)
    logits = torch.cat([first_logits.unsqueeze(1), out.logits[:, :-1]], dim=1)  # [B, C, V]
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return logprobs.gather(-1, batch.completion_ids.unsqueeze(-1)).squeeze(-1)
