"""A training run twice with the same seed over one worker-response cache (``pool.cache``, read-write): how much
of the second run the cache serves, whether its held-out figures match the first's, and the share of a run's
worker calls that repeat an identical earlier request (the first run's, counted by the cache).

    .venv/bin/python -m bench.response_cache [--config configs/train-paper7.yaml] [--set train.steps=40 ...]
        [--cache s3://bucket/prefix] [--tiny] [--label paper7] [--no-write] [--warm-from runs/<run>/sft]

Each run is `cluster.train` in a subprocess with its own Ray cluster (bench/train_run.py), in a directory of its
own under one scratch directory; the second starts from the first's SFT warm start (the same weights: SFT is
seeded) and the cache, nothing else; with ``--warm-from`` both start from that earlier run's warm start.
``--tiny``: the test-sized toy (a few steps, a handful of questions), for a check on a small machine. The figures
count the cluster's pool actors (training, validation, held-out); the driver's one-off calls (the warm start's
measurements, the baselines) are cached too but not counted. A run repeats its calls only where its Conductor
samples do: every draw is keyed by the run's seed and the question sampler (conductor/draw_key.py), and with k >= 1
which groups a step trains on and at which version they were sampled differ by timing unless
``--set train.replayable=true`` (README, "Re-running without paying again").
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from bench.pool_rate import write_section
from bench.train_run import train_run

REPO = Path(__file__).resolve().parents[1]
TINY = ["sft.steps=200", "rollout.temperature=0.5", "simulator.toy_items_per_domain=10", "train.val_questions=6",
        "train.heldout_questions=6", "train.questions_per_step=3", "rollout.group_size=4", "train.steps=4",
        "train.eval_every=2", "learner.checkpoint_every=2", "learner.micro_batch_size=4", "train.format_floor=0",
        "train.val_constrain_format=true"]
FIGURES = ("heldout_accuracy", "heldout_format_rate", "best_val_accuracy", "best_single_accuracy",
           "random_router_accuracy")


def share(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"  # None: no calls


def table(config: str, overrides: list[str], runs: list[dict]) -> str:
    setting = ", ".join(f"`{o}`" for o in overrides) or "its own settings"
    first, second = (run["summary"] for run in runs)
    match = all(first[key] == second[key] for key in FIGURES)
    lines = [f"`{config}` ({setting}) run twice with the same seed over one read-write cache, one run after the "
             "other on this machine. Calls: the cluster's pool actors (training, validation, held-out).\n",
             "| run | worker calls | from the cache | hit rate | identical within the run | $ not spent | "
             "held-out accuracy | held-out format | best validation | wall minutes |",
             "|---|" + "---|" * 9]
    for name, run in zip(("first", "second"), runs):
        s, cache = run["summary"], run["summary"]["response_cache"]
        lines.append(f"| {name} | {cache['calls']} | {cache['hits']} | {share(cache['hit_rate'])} | "
                     f"{share(cache['identical_share'])} | {cache['saved_usd']:.4f} | {s['heldout_accuracy']:.3f} | "
                     f"{s['heldout_format_rate']:.3f} | {s['best_val_accuracy']:.3f} | {run['wall_s'] / 60:.1f} |")
    lines.append(f"\nHeld-out figures ({', '.join(FIGURES)}) of the second run "
                 f"{'equal the first' if match else 'differ from the first'}'s.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/train-toy.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="a dotted config override")
    parser.add_argument("--cache", default=None, help="the cache's path (default: under the scratch directory)")
    parser.add_argument("--tiny", action="store_true", help="the test-sized toy run")
    parser.add_argument("--label", default="", help="names the BENCHMARKS.md section (response_cache_<label>)")
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument("--warm-from", type=Path, help="an earlier run's sft/ (of the same config) for both runs")
    args = parser.parse_args()
    workdir = REPO / ".scratch" / "bench-response-cache"
    shutil.rmtree(workdir, ignore_errors=True)
    overrides = (TINY if args.tiny else []) + args.overrides
    cache = ["pool.cache.mode=read-write", f"pool.cache.path={args.cache or workdir / 'cache'}"]
    runs = []
    for name in ("first", "second"):
        (workdir / name).mkdir(parents=True)
        warm = workdir / "first" / "runs" / "cached" / "sft" if runs else args.warm_from  # the same weights
        runs.append(train_run("cached", overrides + cache, workdir / name, config=args.config, warm_from=warm))
        figures = runs[-1]["summary"]["response_cache"]
        print(f"{name} run: {figures['hits']}/{figures['calls']} calls from the cache, "
              f"{runs[-1]['wall_s'] / 60:.1f} min", flush=True)
    body = table(args.config, overrides, runs)
    print(body)
    if not args.no_write:
        write_section("response_cache" + (f"_{args.label}" if args.label else ""), body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
