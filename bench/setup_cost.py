"""How rough the setup rule's estimates are: what a run's measurements before its loop cost on a simulated
pool whose workers have prices, against conductor/setup_cost.py's estimates of them (which the spend cap's
setup rule reads, conductor/spend_cap.py).

    .venv/bin/python bench/setup_cost.py [--config configs/train-paper7.yaml] [--set key=value ...] [--no-write]

Measures, through the simulator on loopback (latency 0), exactly what the driver would: the warm start's
measured prior or menu on the run's training split (when its ``sft.worker_prior`` measures one) and the
held-out baselines, and prints each one's estimate, its cost, and their ratio. ~3 minutes for paper-7 here.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402


class PromptIds:
    """Prompt ids without a model: fixed workflows never read them (the priors' and baselines' runners)."""

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True):
        return list(range(sum(len(m["content"]) for m in messages) // 50))


def measure(config_path: str, overrides: list[str]) -> list[tuple[str, float, float]]:
    """(what, estimated $, spent $) for each measurement the configured run makes before its loop."""
    from cluster.rollouts import tasks_for
    from conductor.baselines import run_baselines
    from conductor.config_loader import load_config
    from conductor.setup_cost import baselines_estimate, measurement_estimate
    from conductor.simulator.embedded_pool import with_simulated_pool
    from conductor.tasks.splits import configured_splits
    from conductor.worker_prior import measure_prior
    from conductor.workflow_prior import measure_menu

    config = load_config(config_path, [*overrides, "simulator.latency_scale=0"])
    splits = configured_splits(tasks_for(config), config.train)
    rows = []
    with contextlib.ExitStack() as stack:
        config, _ = with_simulated_pool(config, stack)
        estimate = measurement_estimate(config, splits.train)
        if estimate is not None:
            spent: dict[str, float] = {}
            measuring = measure_menu if config.sft.worker_prior == "workflow_reward" else measure_prior
            measuring(config, splits.train, PromptIds(), seed=config.seed,
                      on_spend=lambda billed, unsettled: spent.update(billed))
            rows.append((f"warm start ({config.sft.worker_prior})", sum(estimate.values()), sum(spent.values())))
        _, spent = run_baselines(config, splits.heldout, PromptIds(), seed=config.seed)
        rows.append((f"held-out baselines ({len(splits.heldout)} questions)",
                     sum(baselines_estimate(config, splits.heldout).values()), sum(spent.values())))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/train-paper7.yaml")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="config overrides")
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    rows = measure(args.config, args.overrides)
    lines = [f"`{args.config}`{''.join(f' --set {o}' for o in args.overrides)}, simulated pool at the preset's "
             "prices.\n", "| measurement | estimated | spent | spent / estimated |", "|---|---|---|---|"]
    lines += [f"| {what} | ${estimate:.4f} | ${spent:.4f} | {spent / estimate:.2f} |" for what, estimate, spent in rows]
    body = "\n".join(lines)
    print(body)
    if not args.no_write:
        write_section("setup_cost", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
