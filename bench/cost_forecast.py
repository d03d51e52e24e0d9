"""How early the cost forecast knows what a run costs: one training run on a simulated pool whose workers
have prices, its forecast after 10% (and 25%, 50%) of the steps against what it spent in the end.

    .venv/bin/python bench/cost_forecast.py [--steps 100] [--seeds 0 1 2] [--config configs/train-toy.yaml]
        [--set key=value ...]
    .venv/bin/python bench/cost_forecast.py --quick --no-write      # a check that it runs (4 small steps)

The run is ``cluster.train`` in a subprocess (its own Ray cluster). The forecast is the one the run logs at
every step (conductor/cost_forecast.py: spent so far plus the recent per-step mean times the steps left, the
validations and the held-out evaluation left, with a range one per-step spread wide); the final cost is
summary.json's ``spent_usd`` (the warm start's measured prior or menu where it has one, baselines, steps,
validations and held-out evaluation, workers and judge). The toy's
workers are priced at $0.2-0.5 per 1M prompt tokens, $0.8-2 per 1M completion tokens (its preset file).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402
from bench.train_run import train_run  # noqa: E402

# the slow tests' toy warm start (tests/support/toy_warm_start.py: long enough that workflows parse, so
# workers are called and paid), then 4 small steps
QUICK = ["sft.steps=200", "simulator.toy_items_per_domain=10", "train.val_questions=6", "train.heldout_questions=6",
         "rollout.temperature=0.5", "train.questions_per_step=3", "rollout.group_size=4", "train.eval_every=2",
         "learner.micro_batch_size=4", "train.format_floor=0", "train.plot=false"]
FRACTIONS = (0.1, 0.25, 0.5)
BAR = 0.25  # issue 39: after 10% of a run, within +-25% of the final cost


def forecast_at(forecasts: list[dict], step: int) -> dict | None:
    """The forecast logged at ``step``, or the first one after it (none before the second step)."""
    return next((f for f in forecasts if f["step"] >= step), None)


def usd(amount: float) -> str:
    return f"${amount:.6f}"


def table(summaries: dict[int, dict], steps: int, config: str) -> str:
    """One row per seed and fraction: the forecast logged then against what the seed's run spent in the end."""
    lines = [f"`{config}`, {steps} GRPO steps, simulated pool, seeds {', '.join(map(str, summaries))}. Final cost: "
             "summary.json `spent_usd`. The forecast is the run's own log line at that step.\n",
             "| seed | after | step | forecast (low - high) | final | forecast / final | final in range |",
             "|---|---|---|---|---|---|---|"]
    ratios = {fraction: [] for fraction in FRACTIONS}
    for seed, summary in summaries.items():
        final = summary["spent_usd"]
        for fraction in FRACTIONS:
            f = forecast_at(summary["cost_forecasts"], max(2, math.ceil(fraction * steps)))
            if f is None:
                lines.append(f"| {seed} | {fraction:.0%} | - | no forecast yet | {usd(final)} | - | - |")
                continue
            ratios[fraction].append(f["mid"] / final)
            inside = "yes" if f["low"] <= final <= f["high"] else "no"
            lines.append(f"| {seed} | {fraction:.0%} | {f['step']} | {usd(f['mid'])} ({usd(f['low'])} - "
                         f"{usd(f['high'])}) | {usd(final)} | {f['mid'] / final:.3f} | {inside} |")
    early = ratios[FRACTIONS[0]]
    if early:
        worst = max(abs(r - 1) for r in early)
        verdict = "within" if worst <= BAR else "outside"
        lines.append(f"\nAfter {FRACTIONS[0]:.0%} of the steps the forecast was {min(early):.3f}-{max(early):.3f} "
                     f"of the final cost over {len(early)} seed(s): worst {worst:.1%} off, {verdict} the bar "
                     f"(±{BAR:.0%}).")
    for seed, summary in summaries.items():
        phases = summary["segment_spend_usd"]
        lines.append(f"\nSeed {seed}, where the money went: " + ", ".join(
            f"{name.replace('_', ' ')} {usd(amount)}" for name, amount in phases.items()) + ".")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/train-toy.yaml")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one run per seed, one after another")
    parser.add_argument("--quick", action="store_true", help=f"a tiny run: {' '.join(QUICK)}, 4 steps")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="more config overrides")
    parser.add_argument("--warm-from", type=Path, help="an earlier run's sft/ directory to start from (same "
                        "config and overrides), skipping the SFT warm start")
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    steps = 4 if args.quick else args.steps
    workdir = REPO / ".scratch" / "bench-cost-forecast"
    workdir.mkdir(parents=True, exist_ok=True)
    summaries = {}
    for seed in args.seeds:
        overrides = [*(QUICK if args.quick else []), f"train.steps={steps}", f"seed={seed}", *args.overrides]
        result = train_run(f"bench-cost-forecast-s{seed}", overrides, workdir, config=args.config,
                           warm_from=args.warm_from)
        summaries[seed] = result["summary"]
        print(f"seed {seed}: spent ${result['summary']['spent_usd']:.6f}, {result['wall_s'] / 60:.1f} min", flush=True)
    body = table(summaries, steps, args.config)
    print(body)
    if not args.no_write:
        write_section("cost_forecast", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
