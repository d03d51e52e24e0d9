"""`make train` over several seeds: the README's figures as mean ± s.d. instead of one lucky seed.

    .venv/bin/python bench/train_seeds.py [--seeds 0 1 2] [--set train.max_staleness=1 --label async-k1]

Each seed is the full `make train` job (`configs/train-toy.yaml`: SFT warm start, baselines, 200 GRPO
steps, evaluation) in a subprocess with its own Ray cluster, one after another, in a scratch directory
with no earlier runs (no warm start to reuse). Run it from a fresh clone to see what a new user sees;
the install (`make venv`) is not in these times. Reported per seed and as mean ± s.d.: held-out accuracy,
the per-domain table (each domain's best worker on the same held-out questions: on the toy, perfect routing;
the seeds share one split, `train.split_seed`, so it is the same for all), the best single worker and the
margin over it, GRPO steps/s and wall minutes.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402
from bench.train_run import train_run  # noqa: E402

COLUMNS = (("held-out accuracy", "heldout_accuracy"), ("per-domain table", "domain_table_accuracy"),
           ("best single", "best_single_accuracy"), ("margin", "margin_over_best_single"))


def mean_sd(values: list[float], digits: int = 3) -> str:
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {spread:.{digits}f}"


def table(rows: list[dict], overrides: list[str]) -> str:
    setting = ", ".join(f"`{o}`" for o in overrides) or "the toy's own settings"
    lines = [f"`make train` ({setting}), seeds {', '.join(str(r['seed']) for r in rows)}, one after another on "
             "this 2-core machine; minutes exclude the install.\n",
             "| seed | " + " | ".join(label for label, _ in COLUMNS) + " | GRPO steps/s | wall minutes |",
             "|---|" + "---|" * (len(COLUMNS) + 2)]
    for r in rows:
        s = r["summary"]
        lines.append(f"| {r['seed']} | " + " | ".join(f"{s[key]:.3f}" for _, key in COLUMNS)
                     + f" | {s['steps'] / s['grpo_seconds']:.3f} | {r['wall_s'] / 60:.1f} |")
    lines.append("| mean ± s.d. | " + " | ".join(mean_sd([r["summary"][key] for r in rows]) for _, key in COLUMNS)
                 + f" | {mean_sd([r['summary']['steps'] / r['summary']['grpo_seconds'] for r in rows])} | "
                 + f"{mean_sd([r['wall_s'] / 60 for r in rows], 1)} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="a dotted config override")
    parser.add_argument("--label", default="", help="names the BENCHMARKS.md section (train_seeds_<label>)")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    workdir = REPO / ".scratch" / "bench-seeds"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    rows = []
    for seed in args.seeds:
        result = train_run(f"seed{seed}{'-' + args.label if args.label else ''}", [f"seed={seed}", *args.overrides],
                           workdir)
        rows.append(dict(result, seed=seed))
        print(f"seed {seed}: held-out {result['summary']['heldout_accuracy']:.3f}, {result['wall_s'] / 60:.1f} min",
              flush=True)
    body = table(rows, args.overrides)
    print(body)
    if not args.no_write:
        write_section("train_seeds" + (f"_{args.label}" if args.label else ""), body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
