"""Synthetic but realistic rollout records for store tests and benchmarks."""

from __future__ import annotations

import random

from conductor.rollout_record import RolloutRecord, step_row
from conductor.trace import StepTrace


def make_records(count: int, version: int, seed: int = 0, prompt_tokens: int = 600,
                 completion_tokens: int = 200) -> list[RolloutRecord]:
    rng = random.Random(f"{seed}:{version}")
    records = []
    for i in range(count):
        completion = [rng.randrange(768) for _ in range(completion_tokens)]
        infra = i % 17 == 5
        steps = [step_row(StepTrace(round=0, index=j, shown_worker=j % 3, worker_id=f"w{j % 3}", subtask=f"do part {j}",
                                    access="all" if j else (), visible=tuple(range(j)), response=f"answer {j}",
                                    tokens_in=100 + j, tokens_out=40, latency_s=0.5, cost_usd=0.001, retries=j % 2))
                 for j in range(rng.randint(1, 3))]
        correct = not infra and rng.random() < 0.5
        records.append(RolloutRecord(
            rollout_id=f"s{seed}-v{version}-r{i}", group_id=f"s{seed}-v{version}-g{i // 8}",
            question_id=f"toy/arithmetic/{i // 8}", domain="arithmetic", policy_version=version,
            prompt_token_ids=[rng.randrange(768) for _ in range(prompt_tokens)], completion_token_ids=completion,
            completion_logprobs=[-rng.random() * 3 for _ in completion], completion_text="model_id = [0]",
            format_ok=True, correct=correct, reward=None if infra else (1.0 if correct else 0.5),
            workflow='model_id = [0]\nsubtasks = ["x"]\naccess_list = [[]]', steps=steps, answer="#### 4",
            infra_error="step 0: worker w0: server_error" if infra else None, cost_usd=0.003,
            generation_s=0.1, workers_s=1.2, verify_s=0.01))
    return records
