"""The record of one finished training run, from what it wrote: wall time, the node's memory peak and the
Conductor's sampling rate, with the held-out result beside the best single worker.

    .venv/bin/python bench/run_record.py runs/smollm2-paper7      # prints a table, updates BENCHMARKS.md

A long run (the committed SmolLM2 result) is not repeated inside a benchmark; this reads its
``summary.json`` and the final checkpoint's per-step history. Its ratios are against figures of the same
run: the learner's and the rollouts' share of a step, and the held-out accuracy over the best single
worker's on the same questions.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402
from bench.train_run import read_run  # noqa: E402


def figure(summary: dict, key: str, form: str) -> str:
    value = summary.get(key)
    return form.format(value) if value is not None else "not recorded (the run predates it)"


def record(summary: dict, history: list[dict]) -> str:
    steps = len(history)
    mean = {phase: statistics.fmean(row.get(f"{phase}_s", 0.0) for row in history) for phase in
            ("step", "rollout", "train", "sync")}
    wall, grpo = summary["wall_seconds"], summary["grpo_seconds"]
    rows = [
        ("GRPO steps", f"{steps}"),
        ("whole run, wall (SFT, baselines, GRPO, validation, held-out, export)", f"{wall / 60:.1f} min"),
        ("GRPO wall", f"{grpo / 60:.1f} min, {grpo / max(steps, 1):.0f} s a step"),
        ("a step, mean: waiting for rollouts / learning / weight sync",
         f"{mean['rollout']:.1f} / {mean['train']:.1f} / {mean['sync']:.1f} s "
         f"(learning {mean['train'] / max(mean['step'], 1e-9):.0%} of the step)"),
        ("node memory peak (used, at step ends)", figure(summary, "node_memory_peak_gb", "{:.1f} GB")),
        ("Conductor tokens sampled per s of GRPO wall", figure(summary, "conductor_tokens_per_s", "{:.1f}")),
        ("held-out accuracy / best single worker (same questions)",
         f"{summary['heldout_accuracy']:.3f} / {summary['best_single_accuracy']:.3f} "
         f"({summary['heldout_accuracy'] / summary['best_single_accuracy']:.3f}x)"),
        ("held-out format rate", f"{summary['heldout_format_rate']:.3f}"),
    ]
    table = "| measure | value |\n|---|---|\n" + "\n".join(f"| {name} | {value} |" for name, value in rows)
    source = f"`bench/run_record.py runs/{summary['run_name']}` (read from the run's summary.json and history)"
    return f"{source}:\n\n{table}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a finished run's directory (runs/<run_name>)")
    parser.add_argument("--no-write", action="store_true", help="print only; leave BENCHMARKS.md alone")
    args = parser.parse_args(argv)
    summary, history = read_run(args.run)
    body = record(summary, history)
    print(body)
    if not args.no_write:
        write_section(f"run_{summary['run_name'].replace('-', '_')}", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
