"""One Conductor with a cost dial against three trained at fixed weights (issue 39, scope 4).

    .venv/bin/python -m bench.cost_dial                       # paper-7: four training runs, six evaluations
    .venv/bin/python -m bench.cost_dial --config configs/train-toy.yaml --name cost-dial-toy \\
        --set sft.steps=150 --set train.steps=2 ...             # a tiny run, to see it work

Trains (``python -m cluster.train``, one after another, each in its own Ray cluster):
- ``train-cost-dial``: ``reward.cost_weight_range=[lo, hi]``, a weight drawn per question, its setting in
  the prompt (conductor/cost_dial.py) and, in the warm start's examples, in a plan line (``sft.plan=setting``);
- ``train-cost-fixed-q0``, ``-q5``, ``-q10``: ``reward.cost_penalty_per_usd`` at the weight of cheap (0),
  balanced (5) and best (10);
all kept by validation reward (``train.best_by=reward``), as ``make results-paper7``'s conductor_cost. Then
evaluates (``python -m cluster.evaluate``) the dial policy at each of the three settings
(``evaluate.cost_quality``) and each fixed policy, on the config's evaluation split (paper-7: held-out), each
evaluation reusing the one before, so the last report holds all six rows a seed (and the baselines, with
``--baselines`` pointing at an earlier evaluation's outcomes.parquet, e.g. runs/eval-paper7-baselines/):
its accuracy_cost.png is the accuracy-cost figure with the dial's three points on it.

With ``--seeds 0 1 2`` every one of the four runs is trained at each seed (seed 0 under the names above,
seed n under ``seed<n>-``); the rows of seed n are named ``conductor_dial_s<n>_q<setting>``.

Writes ``<out>/<name>/`` (the report, its figures), ``<out>/<name>.json`` (the point set: each row's seed,
setting, weight, accuracy, $ per question and held-out reward at its weight, and the bar's verdict) and
``<out>/<name>.md``; the last evaluation's outcomes go to ``<runs>/<name>-outcomes.parquet``. The bar, per
setting: the dial policy within 1.5 accuracy points and +-15% of the cost of the policy trained at that
weight, or dominating it (as accurate or more, at no more cost), judged on the means over the seeds (one
seed: the two policies themselves); every dial seed against every fixed seed is listed beside it, because
two fixed runs differing only by seed can miss the bar against each other. A run already finished (its
policy/ has config.json) is reused, so an interrupted bench resumes. Exits 1 when the bar is not met (the
files are written either way).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from conductor.config_loader import load_config
from conductor.cost_dial import NAMED_SETTINGS, weight_of
from conductor.evaluation.outcome import Outcome
from conductor.rewards import RewardConfig, reward

REPO = Path(__file__).resolve().parents[1]
ACCURACY_POINTS, COST_SHARE = 1.5, 0.15


def run(module: str, config: str, overrides: list[str]) -> None:
    args = [sys.executable, "-m", module, "--config", config]
    for override in overrides:
        args += ["--set", override]
    print("$ " + " ".join(args), flush=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), RAY_USAGE_STATS_ENABLED="0")
    if subprocess.run(args, cwd=REPO, env=env).returncode != 0:
        raise SystemExit(f"{module} failed: " + " ".join(args))


def trained(runs: Path, name: str, config: str, overrides: list[str]) -> Path:
    policy = runs / name / "policy"
    if not (policy / "config.json").is_file():
        run("cluster.train", config, [*overrides, f"run_name={name}", "train.best_by=reward"])
    return policy


def verdict(dial: dict, fixed: dict) -> dict:
    """The bar at one setting: within 1.5 points and +-15% of the fixed policy's cost, or dominating it."""
    points = 100 * (dial["accuracy"] - fixed["accuracy"])
    cost_ratio = dial["usd"] / fixed["usd"] if fixed["usd"] > 0 else float("inf") if dial["usd"] > 0 else 1.0
    tolerance = 1e-9  # a dial exactly 1.5 points or 15% away is within (floating point put it a hair outside)
    within = abs(points) <= ACCURACY_POINTS + tolerance and abs(cost_ratio - 1) <= COST_SHARE + tolerance
    dominates = dial["accuracy"] >= fixed["accuracy"] and dial["usd"] <= fixed["usd"]
    return {"accuracy_points": round(points, 3), "cost_ratio": round(cost_ratio, 4), "within": within,
            "dominates": dominates, "meets_bar": within or dominates}


def row_name(kind: str, setting: int, seed: int) -> str:
    """A report row: ``conductor_dial_q5`` at seed 0 (the names before seeds), ``conductor_dial_s1_q5`` after."""
    return f"conductor_{kind}_q{setting}" if seed == 0 else f"conductor_{kind}_s{seed}_q{setting}"


def run_prefix(seed: int) -> str:
    return "" if seed == 0 else f"seed{seed}-"


def row_weights(seeds: Sequence[int], weight_range: tuple[float, float]) -> dict[str, float]:
    """Every dial and fixed row's price of a dollar: its setting's weight, which the fixed policy was
    trained at and the dial was asked for."""
    return {row_name(kind, setting, seed): weight_of(setting, weight_range) for seed in seeds
            for kind in ("dial", "fixed") for setting in NAMED_SETTINGS.values()}


def heldout_rewards(outcomes: Path, reward_config: RewardConfig, weights: dict[str, float]) -> dict[str, float]:
    """Each named row's reward at its own weight (``weights``: row -> price of a dollar), the objective it
    was trained on, scored as training scores an episode (conductor/episode_score.py: the judge's spend kept
    out of the cost; a recursive turn's parse error leaves the root's answer standing): each domain's mean,
    averaged over domains as the report's accuracy is. Episodes that failed on infrastructure are left out."""
    import pyarrow.parquet as pq

    by_row: dict[str, dict[str, list[float]]] = {name: {} for name in weights}
    for outcome in map(Outcome.from_row, pq.read_table(outcomes).to_pylist()):
        if outcome.method not in weights:
            continue
        value = reward(format_ok=outcome.format_ok, correct=bool(outcome.correct), cost_usd=outcome.usd,
                       worker_tokens=outcome.worker_tokens, infra_error=outcome.error is not None,
                       settings=reward_config, score=outcome.score, cost_weight=weights[outcome.method])
        if value is not None:
            by_row[outcome.method].setdefault(outcome.domain, []).append(value)
    return {name: sum(sum(v) / len(v) for v in domains.values()) / len(domains)
            for name, domains in by_row.items() if domains}


def mean_point(points: list[dict]) -> dict:
    """Accuracy, $ per question and (where known) held-out reward averaged over seeds, with their range."""
    accuracy, usd = [p["accuracy"] for p in points], [p["usd"] for p in points]
    mean = {"accuracy": sum(accuracy) / len(accuracy), "usd": sum(usd) / len(usd), "seeds": len(points),
            "accuracy_range": [min(accuracy), max(accuracy)], "usd_range": [min(usd), max(usd)]}
    if all(p.get("reward") is not None for p in points):
        mean["reward"] = sum(p["reward"] for p in points) / len(points)
    return mean


def points(report: dict, weight_range: tuple[float, float], seeds: Sequence[int] = (0,),
           rewards: Optional[dict[str, float]] = None) -> dict:
    """The report's dial and fixed rows at every seed as the point set (with each row's held-out reward at
    its weight, from ``rewards``); the bar at each setting on the seed means, and every dial seed against
    every fixed seed beside it."""
    rows, bar, pairs = [], {}, {}
    for label, setting in NAMED_SETTINGS.items():
        by_kind: dict[str, list[dict]] = {"dial": [], "fixed": []}
        for seed in seeds:
            for kind in by_kind:
                name = row_name(kind, setting, seed)
                cell = report["methods"][name]["average"]
                row = {"name": name, "policy": kind, "seed": seed, "setting": label, "cost_quality": setting,
                       "weight": weight_of(setting, weight_range), "accuracy": cell["accuracy"], "usd": cell["usd"],
                       "worker_tokens": cell["worker_tokens"], "worker_calls": cell["worker_calls"],
                       "reward": (rewards or {}).get(name)}
                by_kind[kind].append(row)
                rows.append(row)
        means = {kind: mean_point(kind_rows) for kind, kind_rows in by_kind.items()}
        bar[label] = {**verdict(means["dial"], means["fixed"]), "dial": means["dial"], "fixed": means["fixed"]}
        pairs[label] = [{"dial_seed": d["seed"], "fixed_seed": f["seed"], **verdict(d, f)}
                        for d in by_kind["dial"] for f in by_kind["fixed"]]
    result = {"seeds": list(seeds), "points": rows, "bar": bar, "pairs": pairs}
    idle = sorted(row["name"] for row in rows if not row["worker_calls"])
    if idle:  # 0 accuracy at $0 "matches" 0 accuracy at $0: no comparison, so no verdict
        return {**result, "meets_bar": False,
                "no_verdict": f"{', '.join(idle)} called no worker (no workflow ran): nothing to compare"}
    return {**result, "meets_bar": all(v["meets_bar"] for v in bar.values())}


def frontier_figure(result: dict, path: Path) -> None:
    """The dial's three settings against the fixed policies', accuracy against $ per question: each seed a
    small marker, the seed means joined cheap -> balanced -> best."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 5.5))
    for kind, marker, color in (("fixed", "o", "tab:blue"), ("dial", "*", "tab:orange")):
        seeds = [p for p in result["points"] if p["policy"] == kind]
        axes.scatter([p["usd"] for p in seeds], [100 * p["accuracy"] for p in seeds], marker=marker, s=40,
                     color=color, alpha=0.35, label=f"{kind}, each seed")
        means = [result["bar"][label][kind] for label in NAMED_SETTINGS]
        axes.plot([m["usd"] for m in means], [100 * m["accuracy"] for m in means], marker=marker, markersize=12,
                  color=color, label=f"{kind}, mean over seeds")
        if kind == "dial":
            for label, mean in zip(NAMED_SETTINGS, means):
                axes.annotate(label, (mean["usd"], 100 * mean["accuracy"]), textcoords="offset points",
                              xytext=(8, -12), fontsize=9)
    axes.set_xlabel("$ per question")
    axes.set_ylabel("accuracy, % (mean over domains)")
    axes.set_title("One Conductor with a cost dial against three trained at fixed weights")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower right", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def spread(values: Sequence[float], scale: float, digits: int) -> str:
    """`` (low-high)`` over seeds, or nothing for one seed."""
    low, high = values
    return f" ({scale * low:.{digits}f}-{scale * high:.{digits}f})"


def markdown(result: dict, name: str, command: str) -> str:
    seeds = result.get("seeds", [0])
    over = "the policies themselves" if len(seeds) == 1 else f"the means over seeds {', '.join(map(str, seeds))}"
    lines = [f"# One Conductor with a cost dial against three trained at fixed weights ({name})", "",
             f"Made by `{command}`. The dial policy drew a weight per question from {result['weight_range']} "
             "(`reward.cost_weight_range`) and was evaluated at three `evaluate.cost_quality` settings; each fixed "
             "policy was trained at that setting's weight (`reward.cost_penalty_per_usd`). The bar: within "
             f"{ACCURACY_POINTS} accuracy points and ±{COST_SHARE:.0%} of the fixed policy's cost, or dominating it, "
             f"judged on {over}" + ("." if len(seeds) == 1 else " (the range over seeds in parentheses)."),
             "", "| setting | cost_quality | weight | dial accuracy | fixed accuracy | points | dial $ | fixed $ | "
             "cost ratio | meets the bar |", "|---|---|---|---|---|---|---|---|---|---|"]
    def ranged(point: dict, key: str, scale: float, digits: int) -> str:
        figure = f"{scale * point[key]:.{digits}f}"
        return figure if len(seeds) == 1 else figure + spread(point[f"{key}_range"], scale, digits)

    for label, setting in NAMED_SETTINGS.items():
        check = result["bar"][label]
        dial, fixed = check["dial"], check["fixed"]
        meets = "yes (dominates)" if check["dominates"] else "yes" if check["within"] else "no"
        lines.append(f"| {label} | {setting} | {weight_of(setting, tuple(result['weight_range'])):g} | "
                     f"{ranged(dial, 'accuracy', 100, 2)} | {ranged(fixed, 'accuracy', 100, 2)} | "
                     f"{check['accuracy_points']:+.2f} | {ranged(dial, 'usd', 1, 5)} | {ranged(fixed, 'usd', 1, 5)} | "
                     f"{check['cost_ratio']:.3f} | {meets} |")
    if all("reward" in result["bar"][label]["dial"] and "reward" in result["bar"][label]["fixed"]
           for label in NAMED_SETTINGS):
        lines += ["", "The objective each policy was trained on: held-out reward at the setting's weight (right or "
                  "wrong, less the weight times $, less the token penalty, floored at the format-error score; each "
                  "domain's mean, averaged over domains):", "",
                  "| setting | dial reward | fixed reward | difference |", "|---|---|---|---|"]
        for label in NAMED_SETTINGS:
            dial, fixed = result["bar"][label]["dial"]["reward"], result["bar"][label]["fixed"]["reward"]
            lines.append(f"| {label} | {dial:.4f} | {fixed:.4f} | {dial - fixed:+.4f} |")
    overall = ("the dial meets the bar at every setting" if result["meets_bar"] else
               f"no verdict: {result['no_verdict']}" if "no_verdict" in result else "the bar is not met")
    lines += ["", f"Overall, on {over}: {overall}."]
    if len(seeds) > 1:
        lines += ["", "Every dial seed against every fixed seed (points, cost ratio, the bar):", "",
                  "| setting | " + " | ".join(f"fixed seed {s}" for s in seeds) + " |",
                  "|---|" + "---|" * len(seeds)]
        for label in NAMED_SETTINGS:
            for dial_seed in seeds:
                cells = []
                for pair in (p for p in result["pairs"][label] if p["dial_seed"] == dial_seed):
                    meets = "dominates" if pair["dominates"] else "yes" if pair["within"] else "no"
                    cells.append(f"{pair['accuracy_points']:+.2f}, {pair['cost_ratio']:.3f}x: {meets}")
                lines.append(f"| {label}, dial seed {dial_seed} | " + " | ".join(cells) + " |")
        met = sum(p["meets_bar"] for pairs in result["pairs"].values() for p in pairs)
        total = sum(len(pairs) for pairs in result["pairs"].values())
        lines += ["", f"Pairs meeting the bar: {met} of {total}."]
    lines += ["", f"![the dial against the fixed policies]({name}/dial_frontier.png)", "",
              f"The whole report, with every method on its accuracy-cost figure: [{name}/report.md]({name}/report.md)",
              "",
              f"![accuracy against cost]({name}/accuracy_cost.png)", ""]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/train-paper7.yaml")
    parser.add_argument("--range", type=float, nargs=2, default=[0.0, 20.0], metavar=("LO", "HI"),
                        help="reward.cost_weight_range: the dial's weight at cost_quality 10 and 0")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        help="a dotted override for every run and evaluation (e.g. a tiny size)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0],
                        help="train every run at each seed (overriding any --set seed=...); the bar is judged on "
                        "the means over seeds")
    parser.add_argument("--runs", default="runs", help="where the four training runs are (output.dir)")
    parser.add_argument("--out", default="docs/results", help="where the report and point set go")
    parser.add_argument("--name", default="cost-dial")
    parser.add_argument("--baselines", default=None, help="an earlier evaluation's outcomes.parquet of the same "
                        "questions, its rows put on the figure (e.g. runs/eval-paper7-baselines/outcomes.parquet)")
    args = parser.parse_args()
    args.seeds = sorted(set(args.seeds))
    lo, hi = args.range
    runs = Path(args.runs)
    steps = []
    for seed in args.seeds:
        common = [*args.overrides, f"output.dir={runs}", f"seed={seed}"]
        # The dial's warm start states the setting in its plan line (sft.plan: setting), so that its worker ids
        # follow it; without it, the warm start and GRPO wrote the same workflows at every setting.
        dial = trained(runs, f"{run_prefix(seed)}train-cost-dial", args.config,
                       [*common, f"reward.cost_weight_range=[{lo},{hi}]", "sft.plan=setting"])
        steps += [(row_name("dial", s, seed), dial, [f"evaluate.cost_quality={s}"]) for s in NAMED_SETTINGS.values()]
        for setting in NAMED_SETTINGS.values():
            fixed = trained(runs, f"{run_prefix(seed)}train-cost-fixed-q{setting}", args.config,
                            [*common, f"reward.cost_penalty_per_usd={weight_of(setting, (lo, hi))}"])
            steps.append((row_name("fixed", setting, seed), fixed, []))
    reuse = [args.baselines] if args.baselines else []
    for index, (row, policy, extra) in enumerate(steps):
        last = index == len(steps) - 1
        where = [f"output.dir={args.out}", f"run_name={args.name}"] if last else [f"output.dir={runs}",
                                                                                 f"run_name=eval-{row}"]
        run("cluster.evaluate", args.config, [*args.overrides, *extra, f"evaluate.policy={policy}",
                                              f"evaluate.conductor_name={row}", "evaluate.methods=[conductor]",
                                              f"evaluate.reuse=[{','.join(reuse)}]", *where])
        reuse = [str(Path(args.out if last else runs, args.name if last else f"eval-{row}", "outcomes.parquet"))]
    report = json.loads(Path(args.out, args.name, "report.json").read_text())
    outcomes = Path(args.out, args.name, "outcomes.parquet")
    rewards = heldout_rewards(outcomes, load_config(args.config, args.overrides).reward,
                              row_weights(args.seeds, (lo, hi)))
    result = {"weight_range": [lo, hi], **points(report, (lo, hi), args.seeds, rewards)}
    Path(args.out, f"{args.name}.json").write_text(json.dumps(result, indent=1) + "\n")
    frontier_figure(result, Path(args.out, args.name, "dial_frontier.png"))
    command = "python -m bench.cost_dial " + " ".join(sys.argv[1:])
    Path(args.out, f"{args.name}.md").write_text(markdown(result, args.name, command.strip()))
    outcomes.replace(runs / f"{args.name}-outcomes.parquet")  # every row's outcomes, kept with the runs
    print(Path(args.out, f"{args.name}.md").read_text())
    return 0 if result["meets_bar"] else 1


if __name__ == "__main__":
    sys.exit(main())
