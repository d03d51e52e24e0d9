"""GRPO: group-normalised advantages and the clipped policy-gradient loss.

Advantages, per group of G samples of one question (infrastructure errors excluded beforehand):

    A_i = (r_i - mean(r)) / (std(r) + eps)          (population std; a group with std 0 gives A = 0)
    A_i = r_i - mean(r)                              (``scale="none"``, Dr. GRPO: Liu et al. 2025)

Why the second: dividing by the group's std makes a group's advantages unit-size whatever its spread.
Where every sample is right and rewards differ only by a small cost penalty (lambda * tokens: a few
hundredths), the std is tiny and the penalty becomes a full-size signal, as large as right against
wrong. Measured on paper-7 at lambda_tok 0.04: most groups were all right, and the policy fell from
2-step verify workflows (0.93 on math) to one step on one worker (0.80) within 40 steps. Unscaled, the
penalty moves a group's advantages by lambda * its token spread, a tie-break between equally right
workflows, as the reward says.

Loss per completion token t of sample i, with ratio_t = exp(logp_t - old_logp_t):

    l_t = -min(ratio_t * A_i, clip(ratio_t, 1 - eps_low, 1 + eps_high) * A_i) * w_t  +  (beta_t + beta_id * c_t) * kl_t
    w_t = min(exp(old_logp_t - behaviour_logp_t), tis_cap)      (truncated importance correction for the
                                                                 engine/learner mismatch; 1 when off)
    kl_t = exp(ref_t - logp_t) - (ref_t - logp_t) - 1            (k3 estimator; only when beta or beta_id > 0)
    c_t  = 1 on the tokens that name a worker, else 0           (conductor/worker_choice_tokens.py: beta_id
                                                                 holds whom to ask open, not the subtasks;
                                                                 learner.worker_id_kl_scope: every worker, or
                                                                 the first alone)
    beta_t = beta_later on the tokens that name a worker after the first (learner.later_worker_kl_coef, where
             set: who checks or builds on the first answer), else beta

Aggregation: "token" averages l_t over every completion token of the batch (long completions weigh
more); "sequence" averages within each completion, then over completions. A batch split into
micro-batches and ranks passes ``normaliser`` = the whole batch's token (or sequence) count, so the summed
micro-batch gradients equal the gradient of the whole batch's mean.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Optional

import torch


@dataclass(frozen=True)
class GrpoSettings:
    eps_low: float = 0.2
    eps_high: float = 0.2
    kl_coef: float = 0.0
    worker_id_kl_coef: float = 0.0
    later_worker_kl_coef: Optional[float] = None  # None: kl_coef on those tokens too
    aggregation: Literal["token", "sequence"] = "token"
    tis_cap: Optional[float] = None  # None: no importance correction
    adv_eps: float = 1e-6

    @property
    def uses_reference(self) -> bool:
        """Whether any KL term is on: then the learner keeps a frozen reference model."""
        return self.kl_coef > 0 or self.worker_id_kl_coef > 0 or (self.later_worker_kl_coef or 0) > 0


def group_advantages(rewards: Sequence[float], eps: float = 1e-6, scale: Literal["std", "none"] = "std") -> list[float]:
    """(r - mean) / (std + eps) within one group, or r - mean (``scale="none"``); all-equal rewards give
    all zeros."""
    values = torch.tensor(list(rewards), dtype=torch.float64)
    if values.numel() == 0:
        return []
    spread = values.std(unbiased=False)
    if spread.item() == 0.0:
        return [0.0] * values.numel()
    centred = values - values.mean()
    return (centred if scale == "none" else centred / (spread + eps)).tolist()


def policy_loss(logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, settings: GrpoSettings = GrpoSettings(),
                behaviour_logprobs: Optional[torch.Tensor] = None,
                ref_logprobs: Optional[torch.Tensor] = None,
                normaliser: Optional[float] = None,
                worker_choice_mask: Optional[torch.Tensor] = None,
                later_worker_mask: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Shapes: [batch, tokens] for the log-prob tensors, ``mask`` (1 on completion tokens),
    ``worker_choice_mask`` and ``later_worker_mask``, [batch] for ``advantages``. Returns the scalar loss and
    diagnostics (clip fraction, mean ratio, KL over completion tokens, KL over the tokens that name a worker)."""
    mask = mask.to(logprobs.dtype)
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages.to(logprobs.dtype).unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - settings.eps_low, 1.0 + settings.eps_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if settings.tis_cap is not None and behaviour_logprobs is not None:
        weight = torch.clamp(torch.exp(old_logprobs - behaviour_logprobs), max=settings.tis_cap).detach()
        per_token = per_token * weight
    kl_mean, worker_id_kl = 0.0, 0.0
    if settings.uses_reference:
        if ref_logprobs is None:
            raise ValueError("a KL term (kl_coef, worker_id_kl_coef or later_worker_kl_coef > 0) needs "
                             "reference logprobs")
        log_ratio = ref_logprobs - logprobs
        kl = torch.exp(log_ratio) - log_ratio - 1.0
        coefficient = torch.full_like(kl, settings.kl_coef)
        if settings.later_worker_kl_coef is not None:
            if later_worker_mask is None:
                raise ValueError("later_worker_kl_coef needs the later-worker mask")
            later = later_worker_mask.to(kl.dtype)
            coefficient = coefficient + (settings.later_worker_kl_coef - settings.kl_coef) * later
        if settings.worker_id_kl_coef > 0:
            if worker_choice_mask is None:
                raise ValueError("worker_id_kl_coef > 0 needs the worker-choice mask")
            choice = worker_choice_mask.to(kl.dtype) * mask
            coefficient = coefficient + settings.worker_id_kl_coef * choice
            worker_id_kl = float((kl * choice).sum() / choice.sum().clamp(min=1))
        per_token = per_token + coefficient * kl
        kl_mean = float((kl * mask).sum() / mask.sum().clamp(min=1))
    loss = aggregate(per_token, mask, settings.aggregation, normaliser)
    with torch.no_grad():
        clip_fraction = float((((ratio < 1 - settings.eps_low) | (ratio > 1 + settings.eps_high)).to(mask.dtype)
                               * mask).sum() / mask.sum().clamp(min=1))
        mean_ratio = float((ratio * mask).sum() / mask.sum().clamp(min=1))
    return loss, {"clip_fraction": clip_fraction, "mean_ratio": mean_ratio, "kl": kl_mean,
                  "worker_id_kl": worker_id_kl}


def aggregate(per_token: torch.Tensor, mask: torch.Tensor, how: str,
              normaliser: Optional[float] = None) -> torch.Tensor:
    """Mean over tokens or sequences; with ``normaliser`` the sum divided by it instead."""
    if how == "token":
        total = (per_token * mask).sum()
    elif how == "sequence":
        per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        total = (per_sequence * (mask.sum(-1) > 0).to(per_token.dtype)).sum()
    else:
        raise ValueError(f"unknown aggregation {how!r}")
    return total / (normaliser if normaliser is not None else max(normaliser_count(mask, how), 1.0))


def normaliser_count(mask: torch.Tensor, how: str) -> float:
    """What ``aggregate`` divides by for this mask: its token count, or its count of non-empty sequences."""
    return float(mask.sum()) if how == "token" else float((mask.sum(-1) > 0).sum())
