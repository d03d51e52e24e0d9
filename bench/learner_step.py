"""Where a learner step of the toy run goes: the tiny policy (`configs/train-toy.yaml`), one DeepSpeed rank,
64 sequences per step with the toy's real prompts (the tiny tokenizer, the toy pool's roster) and
completions of the toy's length.

    .venv/bin/python bench/learner_step.py [--steps 30]

Configurations, one after another in the same run: the toy's learner as it was (ZeRO-2, a plain forward
of every prompt + completion: the baseline), then with the shared-prompt forward (learner/shared_prompt.py,
the default now), then ZeRO-1 and ZeRO-0 with it. Per configuration: the driver's wall time of
``LearnerGroup.train_step``, split into what the rank reports (collate, forward, backward, optimizer:
``LearnerStats.timings``) and the rest (building the sequences, shipping them to the rank and back: Ray
round trip and pickling). The first two steps are warm-up and not counted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402

COMPLETION_TOKENS = 40


def toy_records(policy: str, config, version: int, rng: random.Random) -> list:
    """8 groups of 8: real toy prompts; random completions of the toy's length; rewards with spread."""
    from transformers import AutoTokenizer

    from conductor.prompt_builder import PromptBuilder
    from conductor.rollout_record import RolloutRecord
    from conductor.simulator.presets import load_preset

    tokenizer = AutoTokenizer.from_pretrained(policy)
    builder = PromptBuilder(config, tokenizer, seed=version)
    tasks = rng.sample(list(load_preset(config.simulator).tasks), 8)
    records = []
    for g, task in enumerate(tasks):
        prompt = builder.task_prompt_ids(task, builder.roster())
        for s in range(8):
            length = rng.randint(COMPLETION_TOKENS // 2, COMPLETION_TOKENS * 2)
            completion = [rng.randrange(1, 700) for _ in range(length)]
            records.append(RolloutRecord(
                rollout_id=f"v{version}-g{g}-s{s}", group_id=f"v{version}-g{g}", question_id=task.id,
                policy_version=version, prompt_token_ids=prompt, completion_token_ids=completion,
                completion_logprobs=[-rng.random() for _ in completion], completion_text="", format_ok=True,
                correct=s % 2 == 0, reward=1.0 if s % 2 == 0 else 0.5))
    return records


def measure(policy: str, config, learner, steps: int) -> dict:
    from learner.learner_group import LearnerGroup

    learners = LearnerGroup(policy, learner, total_steps=steps + 2, sequences_per_step=64, seed=0)
    rng, walls, phases = random.Random(0), [], []
    try:
        batches = [toy_records(policy, config, v, rng) for v in range(steps + 2)]
        for index, records in enumerate(batches):
            started = time.perf_counter()
            stats, _ = learners.train_step(records)
            if index >= 2:
                walls.append(time.perf_counter() - started)
                phases.append(stats.timings)
    finally:
        learners.shutdown()
    names = sorted({name for timing in phases for name in timing})
    inside = {name: statistics.mean(t.get(name, 0.0) for t in phases) for name in names}
    wall = statistics.mean(walls)
    return {"wall": wall, "inside": inside, "outside": wall - sum(inside.values())}


def main() -> int:
    import ray

    from conductor.config_loader import load_config
    from conductor.simulator.presets import load_preset, simulated_pool_config
    from learner.tiny_policy import TinyPolicySpec, build_tiny_policy

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    config = load_config(REPO / "configs/train-toy.yaml")
    config = config.model_copy(update={"pool": simulated_pool_config(load_preset(config.simulator), "http://x/v1")})
    scratch = Path(tempfile.mkdtemp(prefix="bench-learner-", dir=REPO / ".scratch"))
    policy = str(build_tiny_policy(scratch / "policy", TinyPolicySpec(vocab_size=config.policy.tiny_vocab_size)))
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=tempfile.mkdtemp(prefix="ray-", dir="/tmp"),
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}}, log_to_driver=False)
    variants = [("ZeRO-2, plain forward (before: baseline)", {"zero_stage": 2, "shared_prompt": False}),
                ("ZeRO-2, shared-prompt forward (after: the toy's setting)", {"zero_stage": 2, "shared_prompt": True}),
                ("ZeRO-1, shared-prompt forward", {"zero_stage": 1, "shared_prompt": True}),
                ("ZeRO-0, shared-prompt forward", {"zero_stage": 0, "shared_prompt": True}),
                ("ZeRO-2, shared-prompt forward, 2 CPUs per rank", {"zero_stage": 2, "shared_prompt": True,
                                                                    "num_cpus_per_rank": 2.0})]
    rows = []
    for label, update in variants:
        learner = config.learner.model_copy(update=update).resolved(asynchronous=False)
        rows.append((label, measure(policy, config, learner, args.steps)))
    ray.shutdown()
    base = rows[0][1]["wall"]
    phases = sorted({name for _, r in rows for name in r["inside"]})
    lines = [f"Learner step of the toy run: 64 sequences (toy prompts, {COMPLETION_TOKENS // 2}-{COMPLETION_TOKENS * 2}"
             f" completion tokens), one rank, micro-batch {config.learner.micro_batch_size}; mean of {args.steps} "
             "steps after 2 warm-up, seconds.\n",
             "| learner | step (driver's wall) | vs baseline | " + " | ".join(phases) + " | outside the rank |",
             "|---|---|---|" + "---|" * len(phases) + "---|"]
    for label, r in rows:
        lines.append(f"| {label} | {r['wall']:.3f} | {r['wall'] / base:.2f}x | "
                     + " | ".join(f"{r['inside'].get(name, 0.0):.3f}" for name in phases) + f" | {r['outside']:.3f} |")
    before, after, wide = rows[0][1], rows[1][1], rows[-1][1]
    lines.append(f"\nThe shared-prompt forward makes the step **{before['wall'] / after['wall']:.1f}x** faster: a toy "
                 "prompt is ~540 tokens and a completion ~50, so the plain forward ran each group's prompt 8 times. "
                 f"What is left is compute. Outside the rank (building the sequences, the Ray round trip, pickling) "
                 f"costs {after['outside'] * 1000:.0f} ms and DeepSpeed's optimizer step "
                 f"{after['inside'].get('optimizer', 0.0) * 1000:.0f} ms; the ZeRO stage changes nothing at 230k "
                 "parameters. Ray sets an actor's OMP_NUM_THREADS to its `num_cpus`, so the toy's rank (1 CPU) "
                 f"computes on one thread; with `learner.num_cpus_per_rank: 2` the step takes {wide['wall']:.3f} s "
                 f"({after['wall'] / wide['wall']:.2f}x). The toy keeps 1: its engine needs the other core.")
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("learner_step", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
