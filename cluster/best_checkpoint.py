"""Which validated policy a run keeps: the one with the best validation score, by ``train.best_by``:

    score = mean validation reward   (reward: the trained objective, cost penalties included)
          = validation accuracy      (accuracy)

each a mean over the validation questions, or (``train.val_average: domains``) over domains of each
domain's mean, as the evaluation report's average: a pooled split where code is 13% of the questions
let a policy that sent code to the wrong worker validate as well as one that did not.

With a token budget (``train.val_max_worker_tokens``) the choice is constrained, not penalised:

    score = -inf   if worker tokens per question (averaged the same way) > budget
                   or some domain had no validation question scored (infrastructure errors: a provider or
                   the sandbox down), since its figure then leaves that domain out and is not comparable

A penalty in the reward only prices tokens; a user with a budget wants the best policy within it, and
a run whose policies drift either side of the line otherwise keeps whichever validated highest.

A cost-penalised run picked by accuracy kept its most accurate, most expensive policy. A score is only
comparable under the basis it was taken on (the figure, and for the reward its settings), so a run
resumed under another basis (say, with a token penalty added) starts its best afresh instead of
measuring new policies against a number that meant something else."""

from __future__ import annotations

import math
from typing import Any, Optional

from conductor.config import Config, TrainConfig
from conductor.rollout import SamplingSettings
from conductor.rollout_summary import RolloutStats
from conductor.workflow_constraint import workflow_regex


def selection_basis(config: Config) -> str:
    train = config.train
    over = " over domains" if train.val_average == "domains" else ""
    if train.val_max_worker_tokens is not None:
        over += f" within {train.val_max_worker_tokens:g} worker tokens"
    if train.val_constrain_format:
        over += " format-constrained"
    if train.best_by == "accuracy":
        return "accuracy" + over
    return "reward" + over + " " + config.reward.model_dump_json()


def validation_sampling(config: Config) -> SamplingSettings:
    """Greedy (``train.eval_temperature``), and with ``train.val_constrain_format`` the root workflow decoded
    under the workflow expression, as ``evaluate.constrain_format`` will deploy the policy: a checkpoint is
    chosen under the decoding it is scored with."""
    expression = None
    if config.train.val_constrain_format:
        expression = workflow_regex(config.pool.subset_size or len(config.pool.workers), config.executor.max_steps)
    return SamplingSettings(temperature=config.train.eval_temperature, top_p=1.0,
                            max_new_tokens=config.rollout.max_new_tokens, format_regex=expression)


def validation_tokens(result: RolloutStats, train: TrainConfig) -> float:
    return result.domain_worker_tokens if train.val_average == "domains" else result.worker_tokens_per_rollout


def within_budget(result: RolloutStats, train: TrainConfig) -> bool:
    return train.val_max_worker_tokens is None or validation_tokens(result, train) <= train.val_max_worker_tokens


def not_eligible(result: RolloutStats, train: TrainConfig) -> Optional[str]:
    """Why a validated policy cannot be kept, however it scored; None when it can."""
    if not within_budget(result, train):
        return "over the token budget"
    if result.unscored_domains:
        return f"{result.unscored_domains} domain(s) with no question scored, left out of its figure"
    return None


def validation_score(result: RolloutStats, train: TrainConfig) -> float:
    domains = train.val_average == "domains"
    if not_eligible(result, train):
        return -math.inf
    if train.best_by == "reward":
        return result.domain_reward if domains else result.mean_reward
    return result.domain_accuracy if domains else result.accuracy


def validation_row(step: int, result: RolloutStats) -> dict[str, Any]:
    """One row of ``TrainState.evals`` (and of summary.json's ``best_val_*``)."""
    return {"step": step, "val_accuracy": result.accuracy, "val_format_rate": result.format_rate,
            "val_reward": result.mean_reward, "val_worker_tokens": result.worker_tokens_per_rollout,
            "val_domain_accuracy": result.domain_accuracy, "val_domain_reward": result.domain_reward,
            "val_domain_worker_tokens": result.domain_worker_tokens, "val_infra_errors": result.infra_errors,
            "val_unscored_domains": result.unscored_domains}


def void_best(state: Any, basis: str, saved_step: Optional[int]) -> Optional[str]:
    """Why a (resumed) state's best cannot stand, having forgotten it, or None: chosen on another basis
    (``adopt_basis``), or its checkpoint overwritten since (``forget_a_later_best``; ``saved_step``: the step
    the ``best`` checkpoint was saved at, None when there is none or the run is fresh)."""
    basis_changed = adopt_basis(state, basis)
    overwritten = forget_a_later_best(state, saved_step)
    if basis_changed:
        return "train.best_by or the reward changed since the best checkpoint was chosen"
    if overwritten:
        return "the best checkpoint was written after the one resumed from (by the segment that stopped)"
    return None


def forget_a_later_best(state: Any, saved_step: Optional[int]) -> bool:
    """A ``best`` checkpoint saved at another step than the resumed state's ``best_step`` was written by the
    segment that stopped after the checkpoint resumed from (``best`` is one directory, overwritten): its
    weights are not those the state validated, and those are gone. Forget the best, so this segment's
    validations choose it afresh; True when forgotten."""
    if saved_step is None or saved_step == state.best_step:
        return False
    state.best_val, state.best_step = -1.0, -1
    return True


def adopt_basis(state: Any, basis: str) -> bool:
    """Record ``basis`` in the trainer state; True when a best taken on another basis was dropped.
    States written before the basis was recorded selected by accuracy."""
    earlier = state.best_basis or "accuracy"
    state.best_basis = basis
    if earlier == basis or state.best_step < 0:
        return False
    state.best_val, state.best_step = -1.0, -1
    return True
