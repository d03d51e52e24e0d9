"""SFT warm start: teach a fresh policy the workflow format before RL, so GRPO starts from samples that
parse (a random policy's rewards are all 0, its advantages all 0, and nothing is learned).

Targets are valid workflows of the configured shapes with uniformly random worker ids
(conductor/example_workflows.py: the format and the space of workflows, not a preference).
Loss is next-token cross-entropy on the target tokens, and by default on the prompt tokens too: a
model trained only on targets whose worker ids are random learns to ignore the question, and RL then
has no features to route on. AdamW with linear warmup then cosine decay (the design's measured recipe:
lr 3e-3, 20 warmup steps).

With ``targets_per_prompt`` k > 1 each drawn prompt carries k example workflows and runs once
(learner/shared_prompt.py), target tokens only: a pretrained model's prompt (~950 tokens for SmolLM2 on
paper-7) is 15x its workflow, so a batch of 16 costs 16/k prompts, not 16.

``target_only_steps`` > 0 adds a second phase on the target tokens alone (a fresh optimizer and schedule,
the same examples' seed): the prompt phase gives the question features, this one the format's
reliability. Measured on paper-7 (656k-parameter policy): prompt loss alone, 50% of samples parse at
temperature 1 and GRPO kept one-step workflows; targets alone, 83% parse but the policy ignored the
domain; 400 + 200 steps, 97% parse at the start of GRPO, which then learned multi-step workflows.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Optional

import torch

from conductor.config import SftConfig
from conductor.example_workflows import random_workflow
from learner.lr_schedule import lr_factor
from learner.shared_prompt import collate_shared, shared_prompt_logprobs
from learner.train_batch import TrainSequence


def lr_at(step: int, settings: SftConfig, steps: int) -> float:
    """The learning rate at ``step`` of a phase ``steps`` long."""
    return settings.lr * lr_factor(step, settings.warmup_steps, steps, "cosine")


def sft_warm_start(model: torch.nn.Module, tokenizer, prompts: Sequence[list[int]], num_workers: int,
                   settings: SftConfig, seed: int = 0,
                   on_step: Optional[Callable[[int, float], None]] = None) -> list[float]:
    """Train ``model`` in place on (prompt ids, random workflow + end-of-turn) pairs; returns the losses of
    both phases. ``settings`` is the config's ``sft`` section (``prompts`` is the caller's business)."""
    losses = _phase(model, tokenizer, prompts, num_workers, settings, settings.steps, settings.prompt_loss, seed,
                    on_step)
    if settings.target_only_steps:
        losses += _phase(model, tokenizer, prompts, num_workers, settings, settings.target_only_steps, False, seed,
                         on_step)
    return losses


def _phase(model: torch.nn.Module, tokenizer, prompts: Sequence[list[int]], num_workers: int,
           settings: SftConfig, steps: int, prompt_loss: bool, seed: int,
           on_step: Optional[Callable[[int, float], None]] = None) -> list[float]:
    rng = random.Random(seed)
    torch.manual_seed(seed)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else end
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.lr, betas=(0.9, 0.99))
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_at(step, settings, steps)
        if settings.targets_per_prompt > 1:
            loss = _shared_prompt_loss(model, tokenizer, prompts, num_workers, settings, rng, end, pad)
        else:
            loss = _loss(model, tokenizer, prompts, num_workers, settings, rng, end, pad, prompt_loss)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
    model.eval()
    return losses


def _target(tokenizer, settings: SftConfig, num_workers: int, rng: random.Random, end: int) -> list[int]:
    text = random_workflow(settings.shapes, num_workers, rng).render()
    return tokenizer(text, add_special_tokens=False)["input_ids"] + [end]


def _shared_prompt_loss(model: torch.nn.Module, tokenizer, prompts: Sequence[list[int]], num_workers: int,
                        settings: SftConfig, rng: random.Random, end: int, pad: int) -> torch.Tensor:
    """Mean cross-entropy of the target tokens, each drawn prompt run once for its k targets."""
    sequences = []
    for _ in range(settings.batch_size // settings.targets_per_prompt):
        prompt = tuple(rng.choice(prompts))
        for _ in range(settings.targets_per_prompt):
            target = tuple(_target(tokenizer, settings, num_workers, rng, end))
            sequences.append(TrainSequence(prompt, target, (0.0,) * len(target), 0.0))
    batch = collate_shared(sequences, pad)
    logprobs = shared_prompt_logprobs(model, batch)
    return -(logprobs * batch.completion_mask).sum() / batch.completion_mask.sum()


def _loss(model: torch.nn.Module, tokenizer, prompts: Sequence[list[int]], num_workers: int, settings: SftConfig,
          rng: random.Random, end: int, pad: int, prompt_loss: bool) -> torch.Tensor:
    """Next-token cross-entropy over prompt + target (or the target alone) of ``batch_size`` drawn pairs."""
    rows = []
    for _ in range(settings.batch_size):
        prompt = list(rng.choice(prompts))
        rows.append((prompt, _target(tokenizer, settings, num_workers, rng, end)))
    width = max(len(p) + len(t) for p, t in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), -100, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (prompt, target) in enumerate(rows):
        sequence = prompt + target
        ids[i, :len(sequence)] = torch.tensor(sequence)
        start = 0 if prompt_loss else len(prompt)
        labels[i, start:len(sequence)] = torch.tensor(sequence[start:])
        mask[i, :len(sequence)] = 1
    return model(input_ids=ids, attention_mask=mask, labels=labels).loss
