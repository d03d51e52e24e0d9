"""Training at the provider's limit: the toy run (`configs/train-toy.yaml`) against a simulated provider whose
request limit, not this machine, sets the pace, under ``train.max_staleness`` k = 0 (sync), 1, 2 and 4.

    .venv/bin/python bench/provider_limit.py [--steps 60] [--rpm 300] [--tpm 3000000] [--modes 0 1 2 4]

The provider: the simulator's toy workers at ``--latency-scale 40`` (~2 s a call, 5-95%: ~0.9-4.5 s, like a
hosted model's), limited to ``--rpm`` requests and ``--tpm`` tokens per 60 s window on both sides: the pool
spec the run calls it with (``simulator.client_rpm``/``client_tpm``: the client keeps under them) and the
server (``simulator.rpm``: it answers 429 past it), with room for ``--concurrency`` calls in flight so that
only the rate limits bind. A toy step makes ~56 worker calls (measured: 225 in 4 sync steps); at the
default 300 requests a minute they take ~11 s of the limit, where the unlimited async run at this latency
took ~4.3 s a step on 2 cores (BENCHMARKS.md `async_vs_sync`): the provider, not the machine, sets the pace.
A call uses ~50 tokens but is charged prompt + max_tokens (4096) until its usage comes back, so the tpm
must cover the calls in flight at that charge: tokens ÷ tpm stays small at any tpm that does not bind.

Each mode is a full ``cluster.train`` run in a subprocess (its own Ray cluster), one after another, all
from the first mode's SFT warm start. Reported per mode, over the GRPO loop's training spans only (the
warm start, the baselines, the validations between steps and the held-out evaluation are left out), from
the pool actor's own counters (summary.json ``training_pool``, conductor/pool_utilisation.py):

- requests/s ÷ (rpm / 60 s), the bar: >= 0.9 at the best k (the client's ceiling is 60 / 61.2 = 0.98);
- tokens a minute (usage) ÷ tpm; 429s from the server;
- pool busy: the share of the span with a request out at the provider; waiting: with a call queued for
  the rate budget (close to 1: demand exceeded the limit all along);
- steps/s over the same spans, and held-out accuracy at equal steps, against sync's;
- the oldest group trained, in versions behind the learner (trained_groups.jsonl; the bound: k).

Exits 1 when no mode reaches 0.9 of the rpm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402
from bench.train_run import train_run  # noqa: E402
from conductor.rate_limits import send_margin  # noqa: E402

BAR = 0.9
WINDOW_S = 60.0
PROVIDER = "sim"


def run_mode(k: int, args: argparse.Namespace, workdir: Path, warm_from: Path | None) -> dict:
    overrides = [f"train.steps={args.steps}", f"train.max_staleness={k}", f"seed={args.seed}",
                 f"simulator.latency_scale={args.latency_scale}", f"simulator.rate_window_s={WINDOW_S}",
                 f"simulator.client_rpm={args.rpm}", f"simulator.rpm={args.rpm}",
                 f"simulator.client_max_concurrency={args.concurrency}", *args.set]
    if args.tpm:
        overrides.append(f"simulator.client_tpm={args.tpm}")
    result = train_run(f"bench-provider-limit-k{k}-s{args.seed}", overrides, workdir, warm_from=warm_from)
    pool = result["summary"].get("training_pool", {}).get(PROVIDER)
    if not pool or not pool.get("seconds"):
        raise SystemExit(f"mode k={k}: summary.json has no training_pool figures for provider {PROVIDER!r}")
    lag = max_lag(result["run"])
    if lag > k:
        raise SystemExit(f"mode k={k}: a group {lag} versions old was trained (trained_groups.jsonl)")
    return dict(result, k=k, pool=pool, max_lag=lag)


def max_lag(run: Path) -> int:
    """The most versions any trained group was behind the learner that trained it (the bound: k)."""
    steps = [json.loads(line) for line in (run / "trained_groups.jsonl").read_text().splitlines()]
    return max(step["learner_version"] - group["version"] for step in steps for group in step["groups"].values())


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(results: list[dict], args: argparse.Namespace) -> str:
    base = next((r for r in results if r["k"] == 0), results[0])
    ceiling = WINDOW_S / (WINDOW_S + send_margin(WINDOW_S))
    lines = [f"{args.steps} GRPO steps of the toy run per mode, worker latency x{args.latency_scale:g} "
             f"(~{0.05 * args.latency_scale:.1f} s a call), provider limit {args.rpm:g} requests and "
             f"{f'{args.tpm:g} tokens' if args.tpm else 'no token limit'} per {WINDOW_S:g} s (client and server), "
             f"up to {args.concurrency} calls in flight. Over the training spans only, from the pool actor's "
             "counters.\n",
             "| mode | steps/s | requests/s | ÷ rpm | tokens/min | ÷ tpm | pool busy | waiting for the limit "
             "| 429s | oldest trained group | held-out accuracy | vs sync |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        pool, summary = r["pool"], r["summary"]
        label = "sync (k = 0)" if r["k"] == 0 else f"async k = {r['k']}"
        lines.append(f"| {label} | {summary['steps'] / pool['seconds']:.3f} | {pool['requests_per_s']:.2f} | "
                     f"{ratio(pool['rpm_ratio'])} | {pool['tokens_per_window']:.0f} | {ratio(pool['tpm_ratio'])} | "
                     f"{pool['busy']:.2f} | {pool['waiting']:.2f} | {pool['rate_limited']:.0f} | "
                     f"{r['max_lag']} behind | {summary['heldout_accuracy']:.3f} | "
                     f"{summary['heldout_accuracy'] - base['summary']['heldout_accuracy']:+.3f} |")
    best = max(results, key=lambda r: r["pool"]["rpm_ratio"] or 0.0)
    verdict = "meets" if (best["pool"]["rpm_ratio"] or 0.0) >= BAR else "misses"
    lines.append(f"\nBest: k = {best['k']} at {ratio(best['pool']['rpm_ratio'])} of the rpm ({verdict} the bar "
                 f"{BAR}; the client's ceiling is {ceiling:.3f}: it keeps L requests per W + m, "
                 "conductor/rate_limits.py).")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--rpm", type=float, default=300.0, help="requests per 60 s, client and server")
    parser.add_argument("--tpm", type=float, default=3_000_000.0,
                        help="tokens per 60 s at the client (0: none); a call is charged prompt + max_tokens "
                             "(4096) until its usage comes back, so this must cover the calls in flight")
    parser.add_argument("--latency-scale", type=float, default=40.0)
    parser.add_argument("--concurrency", type=int, default=128, help="the provider's max_concurrency")
    parser.add_argument("--modes", type=int, nargs="+", default=[0, 1, 2, 4])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], help="a further override for every mode")
    parser.add_argument("--warm-from", type=Path, help="an earlier run's sft/ to start every mode from")
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    if args.rpm > int(args.rpm):
        raise SystemExit("--rpm: a whole number (the simulator's server limit counts whole requests)")
    args.rpm = int(args.rpm)
    workdir = REPO / ".scratch" / "bench-provider-limit"
    workdir.mkdir(parents=True, exist_ok=True)
    results: list[dict] = []
    for k in args.modes:  # every mode starts from the same warm start: the first mode's unless one is given
        warm = args.warm_from or (results[0]["run"] / "sft" if results else None)
        results.append(run_mode(k, args, workdir, warm))
        print(f"k = {k}: {results[-1]['pool']}", flush=True)
    body = table(results, args)
    print(body)
    if not args.no_write:
        write_section("provider_limit", body)
    return 0 if max(r["pool"]["rpm_ratio"] or 0.0 for r in results) >= BAR else 1


if __name__ == "__main__":
    sys.exit(main())
