"""The rollout record: one sampled Conductor completion, executed, verified and scored. Its Arrow schema
is defined here and nowhere else; the replay store writes it, the learner and analysis tools read it.

Token ids and logprobs are the engine's own (train on exactly these tokens; never re-tokenise).
``recursive_turns`` keeps the Conductor's own turns of the recursive rounds (prompt, completion and
logprobs, as the engine sampled them): the learner trains them with the episode's advantage, so a
policy learns what to write when it sees its team's answer (learner/train_batch.py).
``reward`` is null for infrastructure errors: such rollouts are kept for analysis, not trained on.
``judge_*``: what a judge worker spent grading the answer (conductor/verifiers/judge.py), apart from
``cost_usd`` and the steps' tokens, which are the workers' and which the reward's cost penalties price.
``cost_quality``, ``cost_weight``: a cost-dial run's setting for this question and the price of a dollar
it stands for (conductor/cost_dial.py); null otherwise.
Columns added later read as their defaults from a store written before them (``ADDED_LATER``).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Optional

import pyarrow as pa

from conductor.trace import StepTrace

STEP_TYPE = pa.struct([
    ("round", pa.int32()), ("index", pa.int32()), ("shown_worker", pa.int32()), ("worker_id", pa.string()),
    ("subtask", pa.string()), ("access", pa.string()), ("response", pa.string()), ("tokens_in", pa.int64()),
    ("tokens_out", pa.int64()), ("latency_s", pa.float64()), ("cost_usd", pa.float64()), ("retries", pa.int32()),
    ("error", pa.string()),
])

TURN_TYPE = pa.struct([
    ("prompt_token_ids", pa.list_(pa.int32())), ("completion_token_ids", pa.list_(pa.int32())),
    ("completion_logprobs", pa.list_(pa.float64())), ("policy_version", pa.int64()),
])

SCHEMA = pa.schema([
    pa.field("rollout_id", pa.string(), nullable=False),
    pa.field("group_id", pa.string(), nullable=False),
    pa.field("question_id", pa.string(), nullable=False),
    pa.field("domain", pa.string()),
    pa.field("policy_version", pa.int64(), nullable=False),
    pa.field("prompt_token_ids", pa.list_(pa.int32())),
    pa.field("completion_token_ids", pa.list_(pa.int32())),
    pa.field("completion_logprobs", pa.list_(pa.float64())),  # exact: importance ratios use them
    pa.field("completion_text", pa.string()),
    pa.field("workflow", pa.string()),          # the root workflow, rendered; null on a format error
    pa.field("parse_error", pa.string()),       # ParseFailure value of the first failing round
    pa.field("steps", pa.list_(STEP_TYPE)),
    pa.field("recursion_rounds", pa.int32()),
    pa.field("recursive_turns", pa.list_(TURN_TYPE)),  # the Conductor's turns after the root, in order
    pa.field("answer", pa.string()),
    pa.field("reward", pa.float64()),
    pa.field("format_ok", pa.bool_(), nullable=False),
    pa.field("correct", pa.bool_(), nullable=False),
    pa.field("score", pa.float64()),            # a graded verdict in [0, 1] (a Python reward); null: right/wrong
    pa.field("infra_error", pa.string()),
    pa.field("cost_usd", pa.float64()),
    pa.field("generation_s", pa.float64()),
    pa.field("workers_s", pa.float64()),
    pa.field("verify_s", pa.float64()),
    pa.field("judge_calls", pa.int32()),        # a judged kind's judge calls (retries of a reply with no score too)
    pa.field("judge_tokens", pa.int64()),
    pa.field("judge_cost_usd", pa.float64()),
    pa.field("cost_quality", pa.int32()),       # the cost dial's setting in the prompt; null: no dial
    pa.field("cost_weight", pa.float64()),      # its price of a dollar, the reward's lambda_usd (repricing keeps it)
    pa.field("created_at", pa.timestamp("us", tz="UTC"), nullable=False),
])


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class RolloutRecord:
    rollout_id: str
    group_id: str
    question_id: str
    policy_version: int
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float]
    completion_text: str
    format_ok: bool
    correct: bool
    reward: Optional[float]
    domain: Optional[str] = None
    workflow: Optional[str] = None
    parse_error: Optional[str] = None
    steps: list[dict[str, Any]] = field(default_factory=list)
    recursion_rounds: int = 0
    recursive_turns: list[dict[str, Any]] = field(default_factory=list)
    answer: Optional[str] = None
    infra_error: Optional[str] = None
    cost_usd: float = 0.0
    generation_s: float = 0.0
    workers_s: float = 0.0
    verify_s: float = 0.0
    score: Optional[float] = None  # the verifier's graded verdict, which ``reward`` interpolates (repricing keeps it)
    judge_calls: int = 0
    judge_tokens: int = 0
    judge_cost_usd: float = 0.0
    cost_quality: Optional[int] = None
    cost_weight: Optional[float] = None
    created_at: dt.datetime = field(default_factory=_now)

    def __post_init__(self) -> None:
        if len(self.completion_logprobs) != len(self.completion_token_ids):
            raise ValueError(f"rollout {self.rollout_id}: {len(self.completion_logprobs)} logprobs for "
                             f"{len(self.completion_token_ids)} completion tokens")
        if self.infra_error is not None and self.reward is not None:
            raise ValueError(f"rollout {self.rollout_id}: infrastructure errors carry no reward")
        for turn in self.recursive_turns:
            if len(turn["completion_logprobs"]) != len(turn["completion_token_ids"]):
                raise ValueError(f"rollout {self.rollout_id}: a recursive turn's logprobs do not match its tokens")


def step_row(step: StepTrace) -> dict[str, Any]:
    row = dataclasses.asdict(step)
    row["access"] = "all" if step.access == "all" else ",".join(map(str, step.access))
    row.pop("visible")
    row.pop("finish_reason")  # the endpoint's; the replay store keeps its schema
    row.pop("error_kind")  # the endpoint's: ``error`` says it in full
    row.pop("reasoning_tokens")  # the calibration's (within tokens_out)
    row.pop("failed_attempts_usd")  # the endpoint's: a run's spend is the pool's meters (conductor/spend_meter.py)
    row.pop("unsettled_attempts")
    return row


def to_rows(records: list[RolloutRecord]) -> list[dict[str, Any]]:
    """Shallow dicts (``dataclasses.asdict`` deep-copies every token list: several times slower)."""
    return [{name: getattr(r, name) for name in SCHEMA.names} for r in records]


def to_table(records: list[RolloutRecord]) -> pa.Table:
    return pa.Table.from_pylist(to_rows(records), schema=SCHEMA)


def from_table(table: pa.Table) -> list[RolloutRecord]:
    """Records of a table written by this schema or an earlier one (a store written before
    ``recursive_turns`` or the judge columns existed reads with none: their defaults)."""
    names = [name for name in SCHEMA.names if name in table.column_names]
    return [RolloutRecord(**{k: v for k, v in row.items() if v is not None or k not in ADDED_LATER})
            for row in table.select(names).to_pylist()]


ADDED_LATER = frozenset({"recursive_turns", "judge_calls", "judge_tokens", "judge_cost_usd"})
