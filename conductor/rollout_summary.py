"""What a batch of rollout records says, as numbers: the per-step log line, the rollouts command's
summary and the evaluations all use this one definition. Infrastructure errors are counted, never
scored. A judge's calls, tokens and $ (judged kinds) are figures of their own, in no worker figure.
``mean_score`` exists only where a graded verifier (a plug-in: Python, a reward server, a judge) gave scores: accuracy
counts a score of 0.5 or more as right, the mean score keeps the fractions."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Optional

from conductor.rollout_record import RolloutRecord


@dataclass(frozen=True)
class RolloutStats:
    rollouts: int
    infra_errors: int
    format_rate: float                   # over scored rollouts
    accuracy: float                      # over scored rollouts
    mean_reward: float                   # over scored rollouts
    steps_per_workflow: float            # over parsed workflows
    conductor_tokens_per_rollout: float
    worker_tokens_per_rollout: float
    cost_usd_per_rollout: float
    domain_accuracy: float = 0.0         # the mean over domains of each domain's accuracy
    domain_reward: float = 0.0           # the same for the reward: an evaluation report's "average"
    domain_worker_tokens: float = 0.0    # the same for worker tokens per question (the report's tokens column)
    judge_calls_per_rollout: float = 0.0
    judge_tokens_per_rollout: float = 0.0
    judge_cost_usd_per_rollout: float = 0.0
    mean_score: Optional[float] = None   # over scored rollouts with a graded score; None: no graded verdicts
    unscored_domains: int = 0            # domains none of whose rollouts could be scored: in no figure above

    def as_dict(self) -> dict[str, float]:
        """Every figure; ``mean_score`` only where there are graded scores."""
        figures = dataclasses.asdict(self)
        if self.mean_score is None:
            del figures["mean_score"]
        return figures


def worker_tokens(record: RolloutRecord) -> int:
    """Worker tokens an episode spent, prompts and completions, over every round."""
    return sum(s["tokens_in"] + s["tokens_out"] for s in record.steps)


def domain_mean(scored: Sequence[RolloutRecord], figure: Callable[[RolloutRecord], float]) -> float:
    """Each domain's mean of ``figure``, averaged over domains: a domain that is a small share of the
    questions counts as much as the others, as in the evaluation report's average."""
    by_domain: dict[str, list[float]] = defaultdict(list)
    for r in scored:
        by_domain[r.domain or ""].append(figure(r))
    return sum(sum(v) / len(v) for v in by_domain.values()) / max(1, len(by_domain))


def summarise(records: Sequence[RolloutRecord]) -> RolloutStats:
    scored = [r for r in records if r.infra_error is None]
    count = max(1, len(scored))
    parsed = [r for r in scored if r.format_ok]
    graded = [r.score for r in scored if r.score is not None]
    return RolloutStats(
        rollouts=len(records), infra_errors=len(records) - len(scored),
        format_rate=len(parsed) / count,
        accuracy=sum(r.correct for r in scored) / count,
        mean_reward=sum(r.reward or 0.0 for r in scored) / count,
        steps_per_workflow=sum(len(r.steps) for r in parsed) / max(1, len(parsed)),
        conductor_tokens_per_rollout=sum(len(r.completion_token_ids) for r in records) / max(1, len(records)),
        worker_tokens_per_rollout=sum(map(worker_tokens, records)) / max(1, len(records)),
        cost_usd_per_rollout=sum(r.cost_usd for r in records) / max(1, len(records)),
        domain_accuracy=domain_mean(scored, lambda r: float(r.correct)),
        domain_reward=domain_mean(scored, lambda r: r.reward or 0.0),
        domain_worker_tokens=domain_mean(records, worker_tokens),
        judge_calls_per_rollout=sum(r.judge_calls for r in records) / max(1, len(records)),
        judge_tokens_per_rollout=sum(r.judge_tokens for r in records) / max(1, len(records)),
        judge_cost_usd_per_rollout=sum(r.judge_cost_usd for r in records) / max(1, len(records)),
        mean_score=sum(graded) / len(graded) if graded else None,
        unscored_domains=len({r.domain or "" for r in records} - {r.domain or "" for r in scored}))
