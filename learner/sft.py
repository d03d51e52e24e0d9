"""SFT warm start: teach a fresh policy the workflow format before RL, so GRPO starts from samples that
parse (a random policy's rewards are all 0, its advantages all 0, and nothing is learned).

Targets are valid workflows of the configured shapes with uniformly random worker ids
(conductor/example_workflows.py: the format and the space of workflows, not a preference), or with
worker ids drawn by a measured per-domain prior (``sft.worker_prior: domain_reward``,
conductor/worker_prior.py: also a preference, which worker for which kind of question), or whole
workflows drawn from a measured per-domain menu (``workflow_reward``, conductor/workflow_prior.py).
Loss is next-token cross-entropy on the target tokens, and by default on the prompt tokens too: a
model trained only on targets whose worker ids are random learns to ignore the question, and RL then
has no features to route on. AdamW with linear warmup then cosine decay (the design's measured recipe:
lr 3e-3, 20 warmup steps).

With ``targets_per_prompt`` k > 1 each drawn prompt carries k example workflows and runs once
(learner/shared_prompt.py), target tokens only: a pretrained model's prompt (~950 tokens for SmolLM2 on
paper-7) is 15x its workflow, so a batch of 16 costs 16/k prompts, not 16.

With ``plans`` (``sft.plan: restate``) each example starts with a plan line that repeats the question's first
words, worker ids still uniform: the policy learns to read the question into its completion, so the worker
id it writes a few tokens later sits next to the words that tell kinds of question apart. Measured on the
toy: without it, GRPO's greedy routing stayed on one worker for tens of steps, then at a two-domain plateau
(reverse and sort end in the same instruction line; the words that differ are behind it), 0.58-0.68 after 100
steps; with it, 0.98-1.00 (docs/experiments.md, "the toy learns on every seed").

With ``recursive_prompts`` (``sft.recursive_share``, conductor/recursive_examples.py) that share of the
examples answer the recursive round's prompt of the same question instead: three empty lists (accept) or a
workflow, drawn as ``sft.recursive_accept`` says, after the same plan line. ``sft.recursive_steps`` instead
adds a last phase on those examples (target tokens, a fresh optimizer and schedule, peak lr
``sft.recursive_lr``), so the root's phases draw and train exactly as a run without the round; with
``sft.recursive_phase_share`` < 1 the rest of that phase's examples replay the root's. The recursive prompt
holds the root's as its prefix, so a phase on recursive examples alone teaches the root too: accept-only
targets made every T = 1 root sample accept (docs/experiments.md, "the recursive round taught to accept").
Mixed in, or in a last phase at the root's lr, the round changed how the root read a question type nothing
trained on; at a tenth of it, it did not (docs/experiments.md, "a recursive phase that leaves the root as it was").

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
from conductor.example_workflows import Menu, example_text
from conductor.recursive_examples import ACCEPT
from learner.lr_schedule import lr_factor
from learner.shared_prompt import collate_shared, shared_prompt_logprobs
from learner.train_batch import TrainSequence


def lr_at(step: int, settings: SftConfig, steps: int) -> float:
    """The learning rate at ``step`` of a phase ``steps`` long."""
    return settings.lr * lr_factor(step, settings.warmup_steps, steps, "cosine")


def sft_warm_start(model: torch.nn.Module, tokenizer, prompts: Sequence[list[int]], num_workers: int,
                   settings: SftConfig, seed: int = 0,
                   on_step: Optional[Callable[[int, float], None]] = None,
                   worker_weights: Optional[Sequence[Sequence[float]]] = None,
                   menus: Optional[Sequence[Menu]] = None, plans: Optional[Sequence[str]] = None,
                   recursive_prompts: Optional[Sequence[list[int]]] = None) -> list[float]:
    """Train ``model`` in place on (prompt ids, random workflow + end-of-turn) pairs; returns the losses of
    both phases. ``settings`` is the config's ``sft`` section (``prompts`` is the caller's business).
    ``worker_weights``, one row per prompt, draws that prompt's example workers (conductor/worker_prior.py)
    instead of uniformly; ``menus``, one per prompt, draws its whole example workflows
    (conductor/workflow_prior.py) instead of shapes and workers (an empty menu, a roster that shows none of
    its workers: the shapes and uniform workers). ``plans``, one per prompt, is written before each of that
    prompt's example workflows (``sft.plan``). ``recursive_prompts``, one per prompt, is that question's
    recursive-round prompt, drawn for ``sft.recursive_share`` of the examples and for every example of the
    ``sft.recursive_steps`` phase."""
    for name, rows in (("rows of worker weights", worker_weights), ("menus", menus), ("plans", plans),
                       ("recursive prompts", recursive_prompts)):
        if rows is not None and len(rows) != len(prompts):
            raise ValueError(f"{len(rows)} {name} for {len(prompts)} prompts")
    if worker_weights is not None and menus is not None:
        raise ValueError("worker weights and menus are two ways to draw the examples: give one")
    if (settings.recursive_share > 0 or settings.recursive_steps) and recursive_prompts is None:
        raise ValueError("sft.recursive_share > 0 or sft.recursive_steps > 0 needs the recursive-round prompts")
    examples = _Examples(prompts, worker_weights, menus, num_workers, settings, plans, recursive_prompts)
    losses = _phase(model, tokenizer, examples, settings, settings.steps, settings.prompt_loss, seed, on_step)
    if settings.target_only_steps:
        losses += _phase(model, tokenizer, examples, settings, settings.target_only_steps, False, seed, on_step)
    if settings.recursive_steps:
        lr = settings.recursive_lr or settings.lr
        phase = settings.model_copy(update={"recursive_share": settings.recursive_phase_share, "lr": lr})
        examples = _Examples(prompts, worker_weights, menus, num_workers, phase, plans, recursive_prompts)
        losses += _phase(model, tokenizer, examples, phase, settings.recursive_steps, False, seed + 1, on_step)
    return losses


class _Examples:
    """(prompt, example workflow) draws: a prompt uniformly, then a workflow for it."""

    def __init__(self, prompts: Sequence[list[int]], worker_weights: Optional[Sequence[Sequence[float]]],
                 menus: Optional[Sequence[Menu]], num_workers: int, settings: SftConfig,
                 plans: Optional[Sequence[str]] = None, recursive_prompts: Optional[Sequence[list[int]]] = None):
        self.prompts, self.worker_weights, self.menus, self.plans = prompts, worker_weights, menus, plans
        self.num_workers, self.settings, self.recursive_prompts = num_workers, settings, recursive_prompts

    def prompt(self, rng: random.Random) -> int:
        return rng.randrange(len(self.prompts))  # the same draw as rng.choice(prompts)

    def asks_recursive(self, rng: random.Random) -> bool:
        """Whether this example answers the recursive round (drawn only when some do, so the root-only
        stream of draws stays as it was)."""
        return self.settings.recursive_share > 0 and rng.random() < self.settings.recursive_share

    def prompt_ids(self, index: int, recursive: bool) -> list[int]:
        return list((self.recursive_prompts if recursive else self.prompts)[index])

    def target(self, index: int, tokenizer, rng: random.Random, end: int, recursive: bool = False) -> list[int]:
        plan = self.plans[index] if self.plans is not None else ""
        if recursive and rng.random() < self.settings.recursive_accept:
            text = plan + ACCEPT
        else:
            text = example_text(self.settings.shapes, self.num_workers, rng,
                                self.worker_weights[index] if self.worker_weights is not None else None,
                                self.menus[index] if self.menus is not None else None, plan)
        return tokenizer(text, add_special_tokens=False)["input_ids"] + [end]


def _phase(model: torch.nn.Module, tokenizer, examples: _Examples, settings: SftConfig, steps: int,
           prompt_loss: bool, seed: int,
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
            loss = _shared_prompt_loss(model, tokenizer, examples, settings, rng, end, pad)
        else:
            loss = _loss(model, tokenizer, examples, settings, rng, end, pad, prompt_loss)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if on_step:
            on_step(step, losses[-1])
    model.eval()
    return losses


def _shared_prompt_loss(model: torch.nn.Module, tokenizer, examples: _Examples, settings: SftConfig,
                        rng: random.Random, end: int, pad: int) -> torch.Tensor:
    """Mean cross-entropy of the target tokens, each drawn prompt run once for its k targets."""
    sequences = []
    for _ in range(settings.batch_size // settings.targets_per_prompt):
        index, recursive = examples.prompt(rng), examples.asks_recursive(rng)
        prompt = tuple(examples.prompt_ids(index, recursive))
        for _ in range(settings.targets_per_prompt):
            target = tuple(examples.target(index, tokenizer, rng, end, recursive))
            sequences.append(TrainSequence(prompt, target, (0.0,) * len(target), 0.0))
    batch = collate_shared(sequences, pad)
    logprobs = shared_prompt_logprobs(model, batch)
    return -(logprobs * batch.completion_mask).sum() / batch.completion_mask.sum()


def _loss(model: torch.nn.Module, tokenizer, examples: _Examples, settings: SftConfig, rng: random.Random, end: int,
          pad: int, prompt_loss: bool) -> torch.Tensor:
    """Next-token cross-entropy over prompt + target (or the target alone) of ``batch_size`` drawn pairs."""
    rows = []
    for _ in range(settings.batch_size):
        index, recursive = examples.prompt(rng), examples.asks_recursive(rng)
        rows.append((examples.prompt_ids(index, recursive), examples.target(index, tokenizer, rng, end, recursive)))
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
