"""Evaluate methods over datasets and a pool: accuracy +- s.e., calls, tokens, $ and latency per question.

    .venv/bin/python -m cluster.evaluate --config configs/eval-paper7.yaml          # or: make eval
    .venv/bin/python -m cluster.evaluate --config configs/eval-paper7.yaml \\
        --set 'evaluate.methods=[single,moa]' --set evaluate.split=heldout --set evaluate.repeats=3

Questions: the configured datasets, or the simulated preset's; all of them or one split as training makes
it; or (``evaluate.split=unseen``) the preset's task types that nothing trains on, the trained routers still
learning on the train split (conductor/simulator/unseen.py). Pool: the configured providers (real APIs), or,
when ``pool.workers`` is empty, the simulated preset, started here. Writes ``<output.dir>/<run_name>/``
outcomes.parquet, report.json, report.md and two PNGs, and prints the table. Runs in this process (no Ray):
the fixed methods only call the pool, and the conductor methods sample ``evaluate.policy`` from an
in-process vLLM engine (``engine`` section).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import posixpath
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence, Set
from pathlib import Path
from typing import Any, Optional

import fsspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cluster.cli_console import run_command
from conductor.config import Config
from conductor.config_loader import config_from_cli
from conductor.cost_dial import policy_card, resolve_setting
from conductor.episode import EpisodeRunner
from conductor.evaluation import domain_table
from conductor.evaluation import outcome_provenance as provenance
from conductor.evaluation.conductor_method import CONDUCTOR_METHODS, ConductorPolicy, conductor_label
from conductor.evaluation.cost_estimate import estimate
from conductor.evaluation.earlier_outcomes import earlier_outcomes
from conductor.evaluation.harness import Harness
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Outcome
from conductor.evaluation.registry import build_methods, is_derived
from conductor.evaluation.report import AVERAGE, graded, summarise, with_oracle
from conductor.evaluation.report_files import FILES, write_report
from conductor.executor import WorkflowExecutor
from conductor.judge_config import judge_worker
from conductor.local_pool import LocalPool
from conductor.prompt_builder import PromptBuilder
from conductor.rollout import SamplingSettings
from conductor.roster import Roster
from conductor.run_output import RunOutput, local_copy
from conductor.simulator.embedded_pool import with_simulated_pool
from conductor.simulator.presets import load_preset
from conductor.simulator_config import SIMULATED_PROVIDER_ID
from conductor.stop_request import signals_held
from conductor.tasks import Task, load_datasets
from conductor.tasks.splits import configured_splits
from conductor.verifiers.judge import bind_judge
from conductor.vllm_sampler import BatchedGenerator, VllmSampler


def questions_for(config: Config) -> tuple[list[Task], list[Task]]:
    """The configured datasets (or the simulated preset's tasks), cut to the split and per-domain limit;
    and the train split the trained routers learn from (none when evaluating on all questions, or on the
    train split itself: the routers then refuse, naming the splits to use)."""
    preset = None if config.data.datasets else load_preset(config.simulator)
    tasks = load_datasets(config.data.datasets) if preset is None else list(preset.tasks)
    train: list[Task] = []
    if config.evaluate.split == "unseen":
        if preset is None or not preset.unseen:
            raise ValueError("evaluate.split=unseen scores a simulated preset's unseen task types: paper-7 has them; "
                             f"{'the configured datasets' if preset is None else preset.name} do not")
        splits = configured_splits(tasks, config.train)
        tasks, train = list(preset.unseen), list(splits.train)
    elif config.evaluate.split != "all":
        splits = configured_splits(tasks, config.train)
        tasks = list(getattr(splits, config.evaluate.split))
        # scored on the train split, a router would be scored on what it learnt from: none is built then
        train = list(splits.train) if config.evaluate.split != "train" else []
    if config.evaluate.questions_per_domain:
        taken: dict[str, int] = defaultdict(int)
        kept = []
        for task in tasks:
            if taken[task.domain] < config.evaluate.questions_per_domain:
                taken[task.domain] += 1
                kept.append(task)
        tasks = kept
    if not tasks:
        raise ValueError("no questions to evaluate")
    return tasks, train


def reused_conductor_kinds(config: Config, skip: Set[str]) -> set[str]:
    """The Conductor methods whose rows, under this checkpoint's name, are read from earlier outcomes."""
    return {kind for kind in CONDUCTOR_METHODS if conductor_label(config.evaluate.conductor_name, kind) in skip}


def evaluation_setting(config: Config) -> Optional[int]:
    """The cost dial's setting ``evaluate.policy`` runs at: ``evaluate.cost_quality`` (else balanced) for a
    policy trained with the dial (its cost_dial.json, or this config's reward.cost_weight_range); None for
    one without, which refuses a setting (conductor/cost_dial.py)."""
    path = local_copy(config.evaluate.policy, config.output.storage_options) if config.evaluate.policy else None
    return resolve_setting(policy_card(path, config.reward), config.evaluate.cost_quality, "evaluate.cost_quality")


def conductor_sampler(config: Config, console: Console, skip: set[str]) -> Optional[tuple[VllmSampler, Any]]:
    """The vLLM engine and tokenizer of ``evaluate.policy``, when a conductor method is to be run."""
    reused = reused_conductor_kinds(config, skip)
    if not any(kind in CONDUCTOR_METHODS and kind not in reused for kind in config.evaluate.methods):
        if config.evaluate.policy and reused:
            labels = sorted(conductor_label(config.evaluate.conductor_name, kind) for kind in reused)
            raise ValueError(f"evaluate.reuse already holds {', '.join(labels)}, so evaluate.policy would not run: "
                             "name this checkpoint with evaluate.conductor_name (e.g. conductor_new)")
        return None
    if not config.evaluate.policy:
        raise ValueError("the conductor methods need a trained policy: set evaluate.policy")
    from transformers import AutoTokenizer

    path = local_copy(config.evaluate.policy, config.output.storage_options)
    if not Path(path, "config.json").is_file():
        raise ValueError(f"evaluate.policy {config.evaluate.policy!r} is not a model directory (no config.json)")
    setting = evaluation_setting(config)
    console.print(f"conductor: {config.evaluate.policy}" + ("" if setting is None else f" at cost_quality {setting}"))
    # scoring reads the text and token counts, never the logprobs: no per-token logprobs or detokenizing
    return VllmSampler(path, config.engine, config.seed, for_training=False), AutoTokenizer.from_pretrained(path)


async def run_methods(config: Config, tasks: list[Task], console: Console,
                      sampler: Optional[tuple[VllmSampler, Any]] = None, skip: frozenset[str] = frozenset(),
                      train: Sequence[Task] = ()) -> list[Outcome]:
    """Every configured method but those in ``skip`` (read from earlier outcomes) over ``tasks``."""
    pool = LocalPool(config.pool, seed=config.seed)
    try:
        executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility,
                                    parallel=config.executor.parallel_steps)
        policy = None
        if sampler is not None:
            prompts = PromptBuilder(config, sampler[1], seed=config.seed)
            policy = ConductorPolicy(
                BatchedGenerator(sampler[0]), prompts,
                EpisodeRunner(executor, prompts.fewshot, max_steps=config.executor.max_steps,
                              show_prices=config.prompt.show_prices),
                SamplingSettings(config.evaluate.conductor_temperature, 1.0, config.rollout.max_new_tokens),
                config.executor.max_rounds, config.evaluate.conductor_name, config.evaluate.constrain_format,
                evaluation_setting(config))
        judge = bind_judge(config.judge, config.pool, pool)  # grades judged kinds through the same pool
        context = MethodContext(Roster.full(config.pool.workers), executor, config.seed, policy, tuple(train),
                                config.verifier, settings=config.evaluate, judge=judge)
        reused = reused_conductor_kinds(config, skip)
        names = [n for n in config.evaluate.methods if n not in reused]  # read, so no policy is needed
        methods = [m for m in build_methods(names, context) if m.name not in skip]
        print_expected_cost(config, console, [m.name for m in methods], tasks, train)
        total = len(methods) * len(tasks) * config.evaluate.repeats
        columns = (TextColumn("evaluating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[last]}"))
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task("evaluate", total=total, last="")
            done = progress.update

            def on_done(outcome: Outcome) -> None:
                done(bar, advance=1, last=outcome.method)

            harness = Harness(config.verifier, concurrency=config.evaluate.concurrency, judge=judge)
            started = time.perf_counter()

            def on_prepare(name: str) -> None:
                progress.console.print(f"[{time.perf_counter() - started:6.0f}s] preparing {name} (every answer "
                                       "first, or training on the train split)")

            return await harness.run(methods, tasks, config.evaluate.repeats, on_done, on_prepare)
    finally:
        with signals_held():  # a stop's raise waits for the cache's flush of the answers paid for
            await pool.close()


def print_expected_cost(config: Config, console: Console, methods: Sequence[str], tasks: Sequence[Task],
                        train: Sequence[Task]) -> None:
    """Before any call, where the pool bills: what the evaluation should cost (conductor/evaluation/
    cost_estimate.py says how rough). A simulated or loopback provider (the simulator, a local server) is free."""
    from actors.worker_pool import is_loopback

    paid = {p.id for p in config.pool.providers if not is_loopback(p.base_url)}
    if any(w.provider in paid and (w.price_in_per_m or w.price_out_per_m) for w in config.pool.workers):
        console.print(estimate(config, methods, tasks, train).line())


def print_table(console: Console, table: dict, domains: list[str]) -> None:
    """As report.md: accuracy is over scored attempts, so each method's unscored ones (infrastructure
    errors: worker outages, a sandbox that refused to run) are shown beside it."""
    view = Table(title="accuracy % (± s.e.) and cost per question")
    scores = graded(table)  # a graded reward's mean score, as report.md shows it
    for column in ["method", *domains, AVERAGE, *(["score"] if scores else []), "calls", "worker tok", "$ / q",
                   "infra errors"]:
        view.add_column(column, justify="left" if column == "method" else "right")
    for name, cells in table.items():
        avg = cells[AVERAGE]
        score = [] if not scores else ["—" if avg.mean_score is None else f"{avg.mean_score:.3f}"]
        view.add_row(name, *[f"{100 * cells[d].accuracy:.1f} ± {100 * cells[d].se:.1f}" if d in cells else ""
                             for d in domains],
                     f"{100 * avg.accuracy:.1f}", *score, f"{avg.worker_calls:.1f}", f"{avg.worker_tokens:,.0f}",
                     f"{avg.usd:.5f}", str(avg.infra_errors))
    console.print(view)
    judged = {name: cells[AVERAGE] for name, cells in table.items() if cells[AVERAGE].judge_calls}
    if judged:  # apart from the workers' figures, as in report.md
        console.print("judge, per question: " + "; ".join(f"{name} {cell.judge_calls:.2f} calls ${cell.judge_usd:.5f}"
                                                         for name, cell in judged.items()))


def judge_meta(config: Config, outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """report.json's ``judge``: who graded the judged answers and what it spent in all, over the methods run or
    reused (a derived row, the oracle's, repeats theirs); none: no key."""
    graded = [o for o in outcomes if not is_derived(o.method)]
    calls = sum(o.judge_calls for o in graded)
    if not calls:
        return {}
    return {"judge": {"worker": judge_worker(config.judge, config.pool), "calls": calls,
                      "tokens": sum(o.judge_tokens for o in graded), "cost_usd": sum(o.judge_usd for o in graded)}}


def with_table_rows(config: Config) -> tuple[Config, Optional[domain_table.Table]]:
    """With ``domain_table`` among the methods: its table, and the config whose methods also run its rows."""
    if "domain_table" not in config.evaluate.methods:
        return config, None
    if not config.evaluate.domain_table:
        raise ValueError("the domain_table method needs its table: set evaluate.domain_table to a run's "
                         "sft/workflow_prior.json (or worker_prior.json)")
    table = domain_table.read_table(config.evaluate.domain_table, config.output.storage_options)
    methods = list(dict.fromkeys([*config.evaluate.methods, *domain_table.fallback_methods(table)]))
    return config.model_copy(update={"evaluate": config.evaluate.model_copy(update={"methods": methods})}), table


def check_held_out_from_policy(config: Config, tasks: Sequence[Task]) -> None:
    """A policy scored on held-out questions must not have trained or validated on them: its run's
    ``summary.json`` (beside ``runs/<run>/policy``) names the questions it held out. A question outside
    them (this config's splits differ from the run's) fails, counted; a policy with no summary is not
    checked."""
    if not config.evaluate.policy or config.evaluate.split != "heldout":
        return
    summary = posixpath.join(posixpath.dirname(config.evaluate.policy.rstrip("/")), "summary.json")
    try:
        with fsspec.open(summary, "r", **(config.output.storage_options or {})) as handle:
            held_out = set(json.load(handle).get("heldout_question_ids") or ())
    except (FileNotFoundError, ValueError):
        return
    seen = [t.id for t in tasks if t.id not in held_out] if held_out else []
    if seen:
        raise ValueError(f"{len(seen)} of the {len(tasks)} questions scored (e.g. {seen[0]!r}) were not held out "
                         f"by the run that trained evaluate.policy ({summary}): its train/validation split had "
                         "them. Use that run's train.val_questions, train.heldout_questions and train.split_seed")


def run(config: Config, console: Console, command: str = "") -> dict:
    tasks, train = questions_for(config)
    check_held_out_from_policy(config, tasks)
    config, menu = with_table_rows(config)
    out = RunOutput(config.output.dir, config.run_name, config.output.storage_options)
    earlier, stored, reused_derived = earlier_outcomes(config.evaluate.reuse, [t.id for t in tasks],
                                                       config.evaluate.repeats, config.output.storage_options)
    skip = frozenset(o.method for o in earlier)
    if skip:
        console.print(f"reused from earlier evaluations: {', '.join(sorted(skip))}")
    with contextlib.ExitStack() as stack:
        config, sim = with_simulated_pool(config, stack)
        preset = sim.state.preset if sim else None
        provenance.check_reused(config, sorted(skip), stored)  # the pool is known only now
        sampler = conductor_sampler(config, console, skip)
        outcomes = earlier + asyncio.run(run_methods(config, tasks, console, sampler, skip, train))
    if "oracle" in config.evaluate.methods or "oracle" in reused_derived:
        outcomes = with_oracle(outcomes)
    extra: dict[str, Any] = {}
    if menu is not None:
        outcomes, chosen = domain_table.with_domain_table(outcomes, menu)
        extra["domain_table"] = {"path": config.evaluate.domain_table, "rows": domain_table.table_rows(menu),
                                 "generalist": domain_table.generalist(menu), "chosen": chosen}
    if config.evaluate.split == "unseen" and preset is not None:  # what each worker was calibrated to (unseen.py)
        extra["unseen_calibration"] = {w.name: {d: w.accuracy[d] for d in sorted({t.domain for t in tasks})}
                                       for w in preset.workers}
    table = summarise(outcomes)
    domains = sorted({t.domain for t in tasks})
    print_table(console, table, domains)
    simulated = not config.pool.workers or config.pool.providers[0].id == SIMULATED_PROVIDER_ID
    meta = {"title": config.evaluate.title, "command": command, "questions": len(tasks),
            "repeats": config.evaluate.repeats, "split": config.evaluate.split, "seed": config.seed,
            "workers": [w.id for w in config.pool.workers], **judge_meta(config, outcomes),
            "note": (f"Simulated pool (`{config.simulator.preset}`, worker latency "
                     f"x{config.simulator.latency_scale:g})." if simulated else ""), **extra}
    with tempfile.TemporaryDirectory() as staging:
        keys = provenance.written_keys(config, {o.method for o in outcomes if not is_derived(o.method)}, skip, stored)
        paths = write_report(Path(staging), outcomes, table, meta, provenance.file_metadata(keys))
        for path in paths:
            target = out.staged(path.name)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(path.read_bytes())
            out.publish(path.name)
    console.print(f"report: {out.path('report.md')} (also {', '.join(f for f in FILES if f != 'report.md')})")
    return {"table": table, "outcomes": outcomes, "output": out.path()}


def main(argv: list[str] | None = None) -> int:
    config = config_from_cli(argv, default_config="configs/eval-paper7.yaml", description=__doc__)
    return run_command("evaluate", run, config, argv)


if __name__ == "__main__":
    sys.exit(main())
