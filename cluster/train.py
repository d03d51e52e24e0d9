"""Train a Conductor: SFT warm start, then GRPO over the replay store, then an evaluation on held-out
questions against the best single worker and the random router.

    .venv/bin/python -m cluster.train --config configs/train-toy.yaml [--set train.steps=60 ...]

The run is cluster/grpo_recipe.py, read top to bottom: ``setup`` (data, pool, warm start, baselines, the
cluster's actors), ``train`` (the loop), ``finish`` (best checkpoint, held-out evaluation, export,
summary). Ray: embedded local cluster, or the one in RAY_ADDRESS (``ray job submit``). Pool: the
configured providers, or the simulated preset started here when ``pool.workers`` is empty. Everything the
run leaves is under ``<output.dir>/<run_name>/`` (a local dir or s3://).
"""

from __future__ import annotations

import sys

import ray
from rich.console import Console

from cluster.cli_console import cli_console
from cluster.grpo_recipe import GrpoRecipe
from cluster.preflight import ready_to_start
from conductor.config import Config
from conductor.config_loader import config_from_cli
from conductor.pool import ReplayMiss
from conductor.spend_cap import SetupStopped
from conductor.spend_meter import LEDGER
from conductor.stop_request import StopSignal


def train(config: Config, console: Console) -> int:
    """The run's exit code: 0, or 128 + the signal that stopped it (conductor/stop_request.py). In the loop it
    stops after its step, which skips the held-out evaluation and the summary: it has checkpointed, and a resumed
    run evaluates and summarises. Before the loop (the warm start's measurements, the baselines) and after it
    (the held-out evaluation, the export) it stops where it is: what the calls cost is in the ledger, their
    cached answers are stored, and a resumed run pays only for the rest."""
    recipe = GrpoRecipe(config, console)
    try:
        try:
            recipe.setup()
        except StopSignal as stop:
            console.print(f"[yellow]{stop.signal.name} before training: stopped; what its calls "
                          f"cost is in {recipe.out.path(LEDGER)} (and answers in pool.cache, where it is on): "
                          "--set train.resume=true goes on from there[/]")
            return recipe.stop_request.exit_code
        recipe.train()
        if recipe.stop_request.requested:
            return recipe.stop_request.exit_code
        try:
            with recipe.stop_request.interrupting():
                recipe.finish()
        except StopSignal as stop:
            console.print(f"[yellow]{stop.signal.name} after training: stopped before the summary; "
                          f"--set train.resume=true evaluates and summarises from {recipe.checkpoints.latest()}[/]")
            return recipe.stop_request.exit_code
        return 0
    finally:
        recipe.close()


def main(argv: list[str] | None = None) -> int:
    config = config_from_cli(argv, default_config="configs/train-toy.yaml", description=__doc__)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # the log is one line per step
    console = cli_console()
    if not ready_to_start(config, console):
        return 2
    try:
        code = train(config, console)
    except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
        console.print(f"[red]a cluster actor died and did not come back: {type(exc).__name__}: {exc}[/]\n"
                      f"Nothing already checkpointed is lost: rerun with --set train.resume=true")
        return 3
    except SetupStopped as exc:
        console.print(f"[yellow]{exc}[/]")
        return 5
    except ReplayMiss as exc:
        console.print(str(exc), style="red", markup=False)  # the request's text may hold [brackets]
        return 4
    return code


if __name__ == "__main__":
    sys.exit(main())
