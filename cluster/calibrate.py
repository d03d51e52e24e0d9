"""Calibrate a twin of a pool: measure each worker on a sample of your tasks, write a simulator preset.

    .venv/bin/python -m cluster.calibrate --config configs/pool-real-providers.yaml \\
        --set 'data.datasets=[{path: my_tasks.jsonl, fields: {question: q, answer: a}, domain: mine, verifier: exact}]'
    .venv/bin/python -m cluster.train --config configs/train-toy.yaml --set 'pool.workers=[]' \\
        --set simulator.preset=runs/<run_name>/twin.yaml --set 'data.datasets=[...]'

Questions: ``calibrate.questions_per_domain`` of each domain of ``data.datasets`` (or of the simulated
preset's tasks), drawn with ``calibrate.seed``. Pool: the configured providers, or, when ``pool.workers`` is
empty, the simulated preset, started here (the round trip the tests run). Every worker answers every drawn
question, ``calibrate.concurrency`` calls in flight (conductor/calibration.py says how it is asked and
scored). Writes ``<output.dir>/<run_name>/`` calibration.json (every figure, the questions drawn) and
twin.yaml (the preset; conductor/twin_preset.py says what in it is measured and what is not), and prints
the table. Runs in this process, on asyncio: no Ray cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from cluster.cli_console import run_command
from cluster.rollouts import tasks_for
from conductor.calibration import Call, WorkerFit, draw_questions, fit_workers, measure
from conductor.config import Config
from conductor.config_loader import config_from_cli
from conductor.episode_score import EpisodeScorer, Status, scoring_threads
from conductor.executor import WorkflowExecutor
from conductor.judge_config import judge_worker
from conductor.local_pool import LocalPool
from conductor.run_output import RunOutput
from conductor.simulator.embedded_pool import with_simulated_pool
from conductor.simulator.preset_file import read_preset_file
from conductor.stop_request import signals_held
from conductor.tasks.task import Task
from conductor.twin_preset import kept_correlation, twin_header, twin_judge, twin_preset_text
from conductor.verifiers import registry
from conductor.verifiers.judge import bind_judge

TWIN, REPORT = "twin.yaml", "calibration.json"


async def measure_pool(config: Config, questions: list[Task], console: Console) -> list[Call]:
    """Every configured worker on every question, through an in-process pool, with a progress bar."""
    pool = LocalPool(config.pool, seed=config.seed)
    threads = ThreadPoolExecutor(scoring_threads(questions, config.verifier), thread_name_prefix="verify")
    try:
        executor = WorkflowExecutor(pool, question_visibility=config.executor.question_visibility)
        judge = bind_judge(config.judge, config.pool, pool)  # judged tasks graded through the same pool
        scorer = EpisodeScorer(config.verifier, config.reward, threads=threads, cache=True, judge=judge)
        columns = (TextColumn("calibrating"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                   TextColumn("{task.fields[errors]} infra errors"))
        with Progress(*columns, console=console, transient=False) as progress:
            bar = progress.add_task("calibrate", total=len(questions) * len(config.pool.workers), errors=0)
            errors = 0

            def on_done(call: Call) -> None:
                nonlocal errors
                errors += call.status is Status.INFRA_ERROR
                progress.update(bar, advance=1, errors=errors)

            return await measure(executor, config.pool.workers, questions, scorer, config.calibrate.concurrency,
                                 on_done)
    finally:
        try:
            with signals_held():  # first, and whole: the answers paid for are stored before the threads' wait
                await pool.close()
        finally:
            threads.shutdown(wait=True)


def task_source(config: Config) -> tuple[dict[str, Any], str]:
    """The twin's ``tasks`` entry (the same tasks the calibration drew from) and their description."""
    if config.data.datasets:
        entries = [spec.model_dump(mode="json", exclude_unset=True) for spec in config.data.datasets]
        return {"datasets": entries}, "data.datasets (" + ", ".join(s.path for s in config.data.datasets) + ")"
    source = read_preset_file(config.simulator.preset).tasks.model_dump(mode="json", exclude_unset=True)
    return source, f"the tasks of simulator.preset {config.simulator.preset} (the same simulator.* settings load them)"


def print_table(console: Console, fits: list[WorkerFit], domains: list[str]) -> None:
    view = Table(title="calibrated workers: accuracy % (± s.e.), per call")
    for column in ["worker", *domains, "visible tok", "hidden tok", "median ms", "$ / call", "infra errors"]:
        view.add_column(column, justify="left" if column == "worker" else "right")
    for fit in fits:
        cells = [f"{100 * fit.domains[d].accuracy:.1f} ± {100 * fit.domains[d].se:.1f}" if d in fit.domains else ""
                 for d in domains]
        view.add_row(fit.worker, *cells, f"{fit.visible_tokens:,.0f}", f"{fit.hidden_tokens:,.0f}",
                     f"{fit.median_latency_ms:,.0f}", f"{fit.cost_usd:.6f}",
                     str(sum(a.infra_errors for a in fit.domains.values())))
    console.print(view)


def run(config: Config, console: Console, command: str = "") -> dict[str, Any]:
    settings = config.calibrate
    out = RunOutput(config.output.dir, config.run_name, config.output.storage_options)
    drawn = draw_questions(tasks_for(config), settings.questions_per_domain, settings.seed)
    questions = [task for tasks in drawn.values() for task in tasks]
    if not questions:
        raise ValueError("no questions to calibrate on: data.datasets (or the simulated preset) has no tasks")
    with contextlib.ExitStack() as stack:
        config, sim = with_simulated_pool(config, stack)
        if sim:
            console.print(f"simulated pool ({sim.state.preset.name}) on {sim.base_url}")
        workers = [w.id for w in config.pool.workers]
        console.print(f"{len(workers)} workers x {len(questions)} questions "
                      f"({', '.join(f'{d} {len(t)}' for d, t in drawn.items())}): "
                      f"{len(workers) * len(questions)} calls, {settings.concurrency} at a time")
        calls = asyncio.run(measure_pool(config, questions, console))
    fits = fit_workers(calls, workers)
    print_table(console, fits, list(drawn))
    infra_errors = sum(c.status is Status.INFRA_ERROR for c in calls)
    report = {"command": command, "workers": {fit.worker: fit.as_dict() for fit in fits},
              "questions": {d: [t.id for t in tasks] for d, tasks in drawn.items()}, "seed": settings.seed,
              "calls": len(calls), "infra_errors": infra_errors, "cost_usd": sum(c.cost_usd for c in calls),
              "judge_calls": sum(c.judge_calls for c in calls), "judge_cost_usd": sum(c.judge_cost_usd for c in calls),
              "twin": out.path(TWIN)}
    out.write_text(REPORT, text=json.dumps(report, indent=2) + "\n")
    spent = report["judge_calls"] and f"; the judge: {report['judge_calls']} calls, ${report['judge_cost_usd']:.4f}"
    console.print(f"calibration: {out.path(REPORT)} ({len(calls)} calls, {infra_errors} infra errors, "
                  f"${report['cost_usd']:.4f}{spent or ''})")
    tasks, tasks_from = task_source(config)
    base = read_preset_file(settings.base_preset) if settings.base_preset else None
    header = twin_header(command, workers, {d: len(t) for d, t in drawn.items()}, settings.seed, tasks_from,
                         settings.base_preset, out.path(TWIN))
    judged = any(registry.get(t.verifier).by_judge for t in questions)
    judge_id = judge_worker(config.judge, config.pool) if judged else None
    judge_spec = next((w for w in [*config.pool.judges, *config.pool.workers] if w.id == judge_id), None)
    text = twin_preset_text(config.run_name, fits, config.pool.workers, questions, tasks,
                            kept_correlation(base, list(drawn)), header,
                            twin_judge(judge_spec, base, workers) if judged else None)
    out.write_text(TWIN, text=text)
    console.print(f"twin preset: {out.path(TWIN)} (--set simulator.preset={out.path(TWIN)})")
    return {"fits": fits, "calls": calls, "questions": drawn, "twin": out.path(TWIN), "report": out.path(REPORT)}


def main(argv: list[str] | None = None) -> int:
    return run_command("calibrate", run, config_from_cli(argv, description=__doc__), argv)


if __name__ == "__main__":
    sys.exit(main())
