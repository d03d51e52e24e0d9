"""From scored rollout records to the learner's tensors.

Records with ``infra_error`` (reward None) are dropped first: a worker outage says nothing about the
workflow. Advantages are group-normalised over what remains of each group; a group whose rewards are all
equal carries no signal and is dropped when ``filter_zero_spread`` is on (its advantages are 0 either
way, so it would only cost compute). Token ids and behaviour logprobs are the engine's, untouched.

Ranks get whole prompt groups (``shard``), balanced by tokens; each rank's share is then cut into
mini-batches (one optimizer step each) of micro-batches (one forward each), contiguously, so a prompt's
samples share micro-batches and its forward runs once (learner/shared_prompt.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

import torch

from conductor.rollout_record import RolloutRecord
from learner.grpo import group_advantages

if TYPE_CHECKING:
    from conductor.config import LearnerConfig


@dataclass(frozen=True)
class TrainSequence:
    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    behaviour_logprobs: tuple[float, ...]
    advantage: float
    worker_choice: tuple[int, ...] = ()  # completion positions that name a worker (worker_id_kl_coef)
    untrained: tuple[int, ...] = ()  # completion positions kept out of the loss (train_plan_line false)
    later_workers: tuple[int, ...] = ()  # positions that name a worker after the first (later_worker_kl_coef)


@dataclass(frozen=True)
class LearnerStats:
    """What one training step did to the policy (summed over ranks for the loss, averaged otherwise)."""

    loss: float
    clip_fraction: float
    mean_ratio: float
    kl: float
    grad_norm: float
    lr: float
    worker_id_kl: float = 0.0  # the KL over the tokens that name a worker (learner.worker_id_kl_coef > 0)
    skipped: bool = False  # no sequence carried signal: no optimizer step
    timings: dict[str, float] = field(default_factory=dict)  # seconds inside the slowest rank, by phase

    @classmethod
    def skipped_step(cls) -> LearnerStats:
        return cls(loss=0.0, clip_fraction=0.0, mean_ratio=1.0, kl=0.0, grad_norm=0.0, lr=0.0, skipped=True)

    @classmethod
    def merge(cls, per_rank: Sequence[LearnerStats]) -> LearnerStats:
        """Each rank reports its share of the batch loss (summed); the rest are averaged; the phase
        timings are the slowest rank's (the others wait for it in the collectives)."""
        count = len(per_rank)
        slowest = max(per_rank, key=lambda r: sum(r.timings.values()))
        return cls(loss=sum(r.loss for r in per_rank),
                   clip_fraction=sum(r.clip_fraction for r in per_rank) / count,
                   mean_ratio=sum(r.mean_ratio for r in per_rank) / count,
                   kl=sum(r.kl for r in per_rank) / count,
                   grad_norm=sum(r.grad_norm for r in per_rank) / count,
                   lr=sum(r.lr for r in per_rank) / count,
                   worker_id_kl=sum(r.worker_id_kl for r in per_rank) / count, timings=dict(slowest.timings))


@dataclass(frozen=True)
class BatchStats:
    rollouts: int
    infra_errors: int
    groups: int
    zero_spread_groups: int
    sequences: int
    completion_tokens: int


@dataclass
class MicroBatch:
    """Right-padded ``input_ids``; ``completion_mask`` marks positions t whose token ``input_ids[t + 1]``
    is a completion token, so ``logits[:, t]`` scores it (the shift is done here, once)."""

    input_ids: torch.Tensor          # [B, T] long
    attention_mask: torch.Tensor     # [B, T] long
    completion_mask: torch.Tensor    # [B, T - 1] float
    behaviour_logprobs: torch.Tensor  # [B, T - 1] float, 0 outside the mask
    advantages: torch.Tensor         # [B] float
    worker_choice_mask: torch.Tensor  # [B, T - 1] float: 1 where the scored token names a worker
    later_worker_mask: torch.Tensor  # [B, T - 1] float: 1 where it names a worker after the first


def scored_groups(records: Iterable[RolloutRecord]) -> dict[str, list[RolloutRecord]]:
    """Records that carry a reward (infrastructure errors dropped), by group."""
    groups: dict[str, list[RolloutRecord]] = {}
    for record in records:
        if record.infra_error is None and record.reward is not None:
            groups.setdefault(record.group_id, []).append(record)
    return groups


def has_signal(members: Sequence[RolloutRecord], filter_zero_spread: bool = True) -> bool:
    """Whether a scored group would be trained on: it has rewards, and they differ (unless groups
    without spread are kept)."""
    rewards = {r.reward for r in members}
    return bool(rewards) and (len(rewards) > 1 or not filter_zero_spread)


def build_sequences(records: Iterable[RolloutRecord], eps: float = 1e-6, filter_zero_spread: bool = True,
                    advantage_scale: Literal["std", "none"] = "std",
                    first_round_weight: float = 1.0) -> tuple[list[TrainSequence], BatchStats]:
    """One sequence per Conductor turn. A recursive turn gets its episode's advantage, as the root does: the
    final answer is the episode's return, and the turn that accepted or replaced it made it. Where an episode
    had recursive turns, the root's advantage is weighted by ``first_round_weight`` (the paper discounts the
    first round's reward: the last turn decided the answer)."""
    records = list(records)
    groups = scored_groups(records)
    scored = sum(len(members) for members in groups.values())
    sequences, zero_spread = [], 0
    for members in groups.values():
        advantages = group_advantages([r.reward for r in members], eps, advantage_scale)
        if not has_signal(members):
            zero_spread += 1
        if not has_signal(members, filter_zero_spread):
            continue
        for record, advantage in zip(members, advantages):
            if not record.completion_token_ids:
                continue
            weight = first_round_weight if record.recursive_turns else 1.0
            sequences.append(TrainSequence(tuple(record.prompt_token_ids), tuple(record.completion_token_ids),
                                           tuple(record.completion_logprobs), advantage * weight))
            sequences += [TrainSequence(tuple(turn["prompt_token_ids"]), tuple(turn["completion_token_ids"]),
                                        tuple(turn["completion_logprobs"]), advantage)
                          for turn in record.recursive_turns if turn["completion_token_ids"]]
    stats = BatchStats(rollouts=len(records), infra_errors=len(records) - scored, groups=len(groups),
                       zero_spread_groups=zero_spread, sequences=len(sequences),
                       completion_tokens=sum(len(s.completion_ids) for s in sequences))
    return sequences, stats


def shard(sequences: Sequence[TrainSequence], ranks: int) -> list[list[TrainSequence]]:
    """Whole prompt groups to ranks, heaviest first to the rank with the fewest tokens, no rank taking
    more than ceil(n / ranks) sequences (a group too big for the room left is dealt one by one).
    Ranks get a similar number of sequences and of tokens, and a prompt's samples stay together, so the
    shared-prompt forward (learner/shared_prompt.py) runs each prompt once per micro-batch."""
    by_prompt: dict[tuple[int, ...], list[TrainSequence]] = {}
    for s in sequences:
        by_prompt.setdefault(s.prompt_ids, []).append(s)
    cap = -(-len(sequences) // ranks)
    shards: list[list[TrainSequence]] = [[] for _ in range(ranks)]
    tokens = [0] * ranks
    def lightest() -> int:
        return min((r for r in range(ranks) if len(shards[r]) < cap), key=lambda r: (tokens[r], r))

    def place(rank: int, members: list[TrainSequence]) -> None:
        shards[rank].extend(members)
        tokens[rank] += sum(len(s.prompt_ids) + len(s.completion_ids) for s in members)

    for members in sorted(by_prompt.values(), key=lambda m: -sum(len(s.prompt_ids) + len(s.completion_ids) for s in m)):
        rank = lightest()
        if len(members) <= cap - len(shards[rank]):
            place(rank, members)
            continue
        for member in sorted(members, key=lambda s: len(s.completion_ids), reverse=True):
            place(lightest(), [member])  # too big for one rank's room: dealt one by one
    return shards


@dataclass(frozen=True)
class StepPlan:
    """A training step's sequences dealt out: ``per_rank[r][m]`` is rank r's mini-batch m; ``normalisers[m]``
    mini-batch m's token (or sequence) count over all ranks; ``tokens`` every prompt + completion token."""

    per_rank: list[list[list[TrainSequence]]]
    normalisers: list[float]
    tokens: int


def plan_step(sequences: Sequence[TrainSequence], ranks: int, mini_batches: int, aggregation: str) -> StepPlan:
    """Whole prompt groups to ranks (``shard``), each rank's share cut into mini-batches (``split``)."""
    per_rank = [split(share, mini_batches) for share in shard(sequences, ranks)]
    normalisers = [sum(_count(per_rank[r][m], aggregation) for r in range(ranks)) for m in range(mini_batches)]
    return StepPlan(per_rank, normalisers, sum(len(s.prompt_ids) + len(s.completion_ids) for s in sequences))


def accumulation_steps(config: LearnerConfig, sequences_per_step: int) -> int:
    """Micro-batches per optimizer step per rank, sized for a full step's sequences."""
    per_rank_mini = math.ceil(sequences_per_step / (config.ranks * config.mini_batches))
    return max(1, math.ceil(per_rank_mini / config.micro_batch_size))


def _count(sequences: Sequence[TrainSequence], how: str) -> float:
    """The loss's denominator: the tokens it trains (not those kept out), or the sequences."""
    if how == "token":
        return float(sum(len(s.completion_ids) - len(s.untrained) for s in sequences))
    return float(len(sequences))


def split(items: Sequence, parts: int) -> list[list]:
    """``parts`` contiguous, near-equal pieces (some may be empty when there are fewer items)."""
    size, extra = divmod(len(items), parts)
    pieces, start = [], 0
    for index in range(parts):
        end = start + size + (1 if index < extra else 0)
        pieces.append(list(items[start:end]))
        start = end
    return pieces


def collate(sequences: Sequence[TrainSequence], pad_id: int) -> MicroBatch:
    width = max(len(s.prompt_ids) + len(s.completion_ids) for s in sequences)
    rows = len(sequences)
    input_ids = torch.full((rows, width), pad_id, dtype=torch.long)
    attention = torch.zeros((rows, width), dtype=torch.long)
    mask = torch.zeros((rows, width - 1), dtype=torch.float32)
    behaviour = torch.zeros((rows, width - 1), dtype=torch.float32)
    choice = torch.zeros((rows, width - 1), dtype=torch.float32)
    later = torch.zeros((rows, width - 1), dtype=torch.float32)
    for row, s in enumerate(sequences):
        prompt, completion = len(s.prompt_ids), len(s.completion_ids)
        input_ids[row, :prompt + completion] = torch.tensor(s.prompt_ids + s.completion_ids)
        attention[row, :prompt + completion] = 1
        mask[row, prompt - 1:prompt - 1 + completion] = 1.0
        behaviour[row, prompt - 1:prompt - 1 + completion] = torch.tensor(s.behaviour_logprobs)
        for position in s.worker_choice:
            choice[row, prompt - 1 + position] = 1.0
        for position in s.later_workers:
            later[row, prompt - 1 + position] = 1.0
        for position in s.untrained:
            mask[row, prompt - 1 + position] = 0.0
    advantages = torch.tensor([s.advantage for s in sequences], dtype=torch.float32)
    return MicroBatch(input_ids, attention, mask, behaviour, advantages, choice, later)


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """log p(input_ids[:, t + 1] | prefix) for every t: shape [B, T - 1], computed in float32."""
    logprobs = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logprobs.gather(-1, input_ids[:, 1:].unsqueeze(-1)).squeeze(-1)
