"""One SFT warm start of the toy run, shared by the slow tests that run `cluster.train` (the driver reuses
``<output>/<run>/sft`` when it is there): made once per session instead of once per run, and long enough
(200 steps) that the policy samples workflows that parse at temperature 0.5, so the pool, the learner and
their faults and metrics are really exercised. 120 steps sat on the edge: measured on one machine, 6% of
samples parsed (two tests that need some failed), 99% at 200. Runs that use it take ``TOY_WARM_START`` among their
overrides, so their train split is the one it was taught on."""

from __future__ import annotations

from pathlib import Path

TOY_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "train-toy.yaml"
TOY_WARM_START = ["sft.steps=200", "simulator.toy_items_per_domain=10", "train.val_questions=6",
                  "train.heldout_questions=6", "rollout.temperature=0.5"]


def build_toy_warm_start(directory: Path) -> Path:
    from rich.console import Console

    from cluster.rollouts import tasks_for
    from cluster.warm_start import warm_start_policy
    from conductor.config_loader import load_config
    from conductor.run_output import RunOutput
    from conductor.simulator.presets import load_preset, simulated_pool_config
    from conductor.tasks.splits import configured_splits

    config = load_config(TOY_CONFIG, TOY_WARM_START)
    config = config.model_copy(update={"pool": simulated_pool_config(load_preset(config.simulator),
                                                                      "http://127.0.0.1:1/v1")})
    train_tasks = configured_splits(tasks_for(config), config.train).train
    return Path(warm_start_policy(config, RunOutput(str(directory), "warm"), train_tasks, Console()))
