"""The paper-7 SFT warm start with a measured prior, run through the real simulator server (HTTP, the
official client in the pool): shared by the per-worker and the workflow-menu prior tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class SpendRecorder:
    """A run's spend as the warm start sees it (conductor/setup_cost.py's SetupSpend), with no cap."""

    def __init__(self):
        self.spent: dict = {}
        self.estimates: list = []

    def check(self, estimate, what):
        self.estimates.append((what, estimate))

    def add(self, spent, unsettled=None, *, phase):
        assert phase == "warm_start"
        self.spent.update(spent)


def measured_warm_start(tmp_path: Path, shared_data: Path, run_name: str, overrides: list[str],
                        prior_file: str) -> tuple[str, Any, dict, dict]:
    """(the warm start's policy location, the config it ran with, the prior it wrote beside its policy, what
    measuring it spent through the pool, by provider: empty where nothing was measured)."""
    from rich.console import Console

    from cluster.rollouts import tasks_for
    from cluster.warm_start import warm_start_policy
    from conductor.config_loader import load_config
    from conductor.run_output import RunOutput
    from conductor.simulator.presets import simulated_pool_config
    from conductor.simulator.server import SimulatorServer
    from conductor.tasks.splits import configured_splits

    config = load_config("configs/train-paper7.yaml", [
        f"output.dir={tmp_path}", f"run_name={run_name}", f"simulator.data_dir={shared_data}",
        "simulator.latency_scale=0", "sft.steps=2", "sft.target_only_steps=0", "sft.prompts=6", *overrides])
    train = configured_splits(tasks_for(config), config.train).train
    with SimulatorServer(config.simulator.model_copy(update={"port": 0})) as sim:
        config = config.model_copy(update={"pool": simulated_pool_config(sim.state.preset, sim.base_url)})
        spent = SpendRecorder()
        policy = warm_start_policy(config, RunOutput(str(tmp_path), run_name), list(train), Console(quiet=True),
                                   spent)
    return policy, config, json.loads((tmp_path / run_name / "sft" / prior_file).read_text()), spent.spent
