"""Rollouts only (no training): run the Conductor over a dataset, execute and score every sample, and
write the records to the replay store. For evaluating a checkpoint, and for building SFT data from good
rollouts.

    .venv/bin/python -m cluster.rollouts --config configs/rollouts-toy.yaml --set policy.model_path=DIR

Ray: embedded local cluster, or the one in RAY_ADDRESS (as under ``ray job submit``). Pool: the
configured providers, or — when ``pool.workers`` is empty — the simulated preset, started here.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import sys
import time
import uuid
from collections.abc import Sequence

import ray
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from cluster.cli_console import cli_console
from cluster.preflight import ready_to_start
from cluster.rollout_feed import RolloutFeed
from conductor.config import Config
from conductor.config_loader import config_from_cli
from conductor.cost_dial import card_of, setting_line
from conductor.rollout import RolloutRequest
from conductor.rollout_record import RolloutRecord
from conductor.rollout_summary import summarise
from conductor.roster import Roster
from conductor.run_output import RunOutput
from conductor.simulator.embedded_pool import with_simulated_pool
from conductor.simulator.presets import load_preset
from conductor.tasks import Task, load_datasets
from conductor.verifiers.sandbox import host_isolation
from learner.gguf_policy import convert_gguf, is_gguf_source


def tasks_for(config: Config) -> list[Task]:
    """Every task of the configured datasets (each honouring its own ``limit``), or the simulated preset's."""
    if not config.data.datasets:
        return list(load_preset(config.simulator).tasks)
    return load_datasets(config.data.datasets)  # a file with no rows fails, naming it


def policy_path(config: Config, out: RunOutput, name: str = "policy", train_questions: Sequence[str] = ()) -> str:
    """The configured model (a local dir or a URL); a GGUF one converted to a HF directory as ``out/name``
    (reused when already converted; learner/gguf_policy.py); or a tiny policy built from config as
    ``out/name`` (its tokenizer also trained on the pool listing and ``train_questions`` when
    ``policy.tiny_corpus`` is ``run``, and on a cost-dial run's setting lines)."""
    if is_gguf_source(config.policy.model_path):
        convert_gguf(config.policy.model_path, out.staged(name))
        return out.publish(name)
    if config.policy.model_path:
        return config.policy.model_path
    from learner.tiny_policy import TinyPolicySpec, build_tiny_policy, default_corpus

    corpus = default_corpus()
    if config.policy.tiny_corpus == "run":
        listing = Roster.full(config.pool.workers).listing(config.prompt.show_prices)
        corpus += [listing] * 20 + list(train_questions)
        dial = card_of(config.reward)
        corpus += [setting_line(setting) for setting in (dial.settings if dial else ()) for _ in range(5)]
    build_tiny_policy(out.staged(name), TinyPolicySpec(vocab_size=config.policy.tiny_vocab_size, seed=config.seed),
                      corpus)
    return out.publish(name)


def run(config: Config, console: Console) -> dict[str, float]:
    from actors.conductor_engine import start_engines
    from actors.rollout_actor import RolloutActor
    from actors.worker_pool import RayPool
    from cluster.placement import engine_placement_group

    tasks = tasks_for(config)
    tasks = tasks[:config.rollout.limit] if config.rollout.limit else tasks
    out = RunOutput(config.output.dir, config.run_name, config.output.storage_options)
    console.print(f"outputs: {out.url}")
    model = policy_path(config, out)
    store_path = config.store()[0]
    with contextlib.ExitStack() as stack:
        config, _ = with_simulated_pool(config, stack)
        ray.init(address=os.environ.get("RAY_ADDRESS") or "local", ignore_reinit_error=True, log_to_driver=False)
        stack.callback(ray.shutdown)
        engines = start_engines(model, config.engine, config.seed, engine_placement_group(config.engine),
                                storage_options=config.output.storage_options, run_name=config.run_name)
        pool = RayPool(config.pool, seed=config.seed, run_name=config.run_name)  # held here: outlives rollout actors
        stack.callback(pool.flush)  # the response cache's new answers (pool.cache)
        feed = RolloutFeed([RolloutActor.remote(config, model, engines, store_path, config.seed + i)
                            for i in range(config.rollout.actors)])
        requests = [RolloutRequest(f"rollouts-{uuid.uuid4().hex[:8]}-{i}",
                                   tuple(tasks[start:start + config.rollout.questions_per_batch]), return_records=True)
                    for i, start in enumerate(range(0, len(tasks), config.rollout.questions_per_batch))]
        records: list[RolloutRecord] = []
        started = time.time()
        columns = (TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[status]}"))
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("rollouts", total=len(tasks) * config.rollout.group_size, status="")
            for request in requests:
                feed.submit(request)
            while feed.busy:
                for receipt in feed.poll(timeout_s=1.0):
                    records += receipt.records
                    stats = summarise(records)
                    progress.update(bar, completed=len(records), status=f"format {stats.format_rate:.2f} "
                                    f"acc {stats.accuracy:.2f} reward {stats.mean_reward:.2f}")
            pool_stats = pool.stats()
            failed = feed.take_given_up()
            if failed:
                console.print(f"[red]{len(failed)} rollout request(s) failed: {[r.batch_id for r in failed]}[/]")
    reasons = collections.Counter(r.parse_error for r in records if r.parse_error and r.infra_error is None)
    summary = dict(summarise(records).as_dict(), parse_errors=dict(reasons.most_common()),
                   wall_seconds=time.time() - started, store=store_path, pool=pool_stats,
                   sandbox_isolation=host_isolation(), code_isolation_required=config.verifier.require_code_isolation)
    console.print_json(json.dumps(summary))
    out.write_text("summary.json", text=json.dumps(summary, indent=2))
    console.print(f"summary: {out.path('summary.json')}, rollouts: {store_path}")
    return summary


def main(argv: list[str] | None = None) -> int:
    config = config_from_cli(argv, default_config="configs/rollouts-toy.yaml", description=__doc__)
    console = cli_console()
    if not ready_to_start(config, console):
        return 2
    run(config, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
