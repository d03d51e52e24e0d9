"""Which validated policy a run keeps: the one with the best validation score, by ``train.best_by``:

    score = mean validation reward   (reward: the trained objective, cost penalties included)
          = validation accuracy      (accuracy)

each a mean over the validation questions, or (``train.val_average: domains``) over domains of each
domain's mean, as the evaluation report's average: a pooled split where code is 13% of the questions
let a policy that sent code to the wrong worker validate as well as one that did not.

A cost-penalised run picked by accuracy kept its most accurate, most expensive policy. A score is only
comparable under the basis it was taken on (the figure, and for the reward its settings), so a run
resumed under another basis (say, with a token penalty added) starts its best afresh instead of
measuring new policies against a number that meant something else."""

from __future__ import annotations

from typing import Any

from conductor.config import Config, TrainConfig
from conductor.rollout_summary import RolloutStats


def selection_basis(config: Config) -> str:
    over = " over domains" if config.train.val_average == "domains" else ""
    if config.train.best_by == "accuracy":
        return "accuracy" + over
    return "reward" + over + " " + config.reward.model_dump_json()


def validation_score(result: RolloutStats, train: TrainConfig) -> float:
    domains = train.val_average == "domains"
    if train.best_by == "reward":
        return result.domain_reward if domains else result.mean_reward
    return result.domain_accuracy if domains else result.accuracy


def validation_row(step: int, result: RolloutStats) -> dict[str, Any]:
    """One row of ``TrainState.evals`` (and of summary.json's ``best_val_*``)."""
    return {"step": step, "val_accuracy": result.accuracy, "val_format_rate": result.format_rate,
            "val_reward": result.mean_reward, "val_worker_tokens": result.worker_tokens_per_rollout,
            "val_domain_accuracy": result.domain_accuracy, "val_domain_reward": result.domain_reward}


def adopt_basis(state: Any, basis: str) -> bool:
    """Record ``basis`` in the trainer state; True when a best taken on another basis was dropped.
    States written before the basis was recorded selected by accuracy."""
    earlier = state.best_basis or "accuracy"
    state.best_basis = basis
    if earlier == basis or state.best_step < 0:
        return False
    state.best_val, state.best_step = -1.0, -1
    return True
