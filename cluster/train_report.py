"""What a training run shows and leaves behind: the per-step and validation log lines, Ray dashboard gauges, the final
table, the reward-curve PNG and ``summary.json`` (read by other tools: keep its keys stable)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from cluster.step_stats import run_throughput
from conductor.baselines import DOMAIN_TABLE, RANDOM
from conductor.kept_baselines import Baselines
from conductor.run_output import RunOutput

LOG_FIELDS = (  # (key, label, format)
    ("mean_reward", "reward", "{:.3f}"), ("mean_score", "score", "{:.3f}"),  # score: graded rewards only
    ("accuracy", "pass", "{:.2f}"), ("format_rate", "format", "{:.2f}"),
    ("steps_per_workflow", "steps/wf", "{:.2f}"), ("conductor_tokens_per_rollout", "tok", "{:.0f}"),
    ("worker_tokens_per_rollout", "wtok", "{:.0f}"), ("cost_usd_per_rollout", "$", "{:.5f}"),
    ("token_multiplier", "lambda", "{:.3f}"), ("cache_hit_rate", "cached", "{:.0%}"),  # pool.cache on
    ("loss", "loss", "{:+.4f}"), ("grad_norm", "gnorm", "{:.3f}"), ("lr", "lr", "{:.1e}"),
    ("rollout_s", "rollout", "{:.1f}s"), ("train_s", "train", "{:.1f}s"), ("sync_s", "sync", "{:.2f}s"),
)


def validation_line(result: Any, *, kept: bool, not_eligible: Optional[str], best_val: float, best_step: int) -> str:
    """A validation's log line (``result``: its RolloutStats), ending with what it did to the kept checkpoint
    (``not_eligible``: why it could not be kept)."""
    note = ("best so far: kept" if kept else f"best {best_val:.3f} at step {best_step}" if best_step >= 0
            else "none kept yet")
    if not_eligible:
        note = f"{not_eligible}; {note}"
    return (f"  validation: accuracy {result.accuracy:.3f} ({result.domain_accuracy:.3f} over domains), reward "
            f"{result.mean_reward:.3f}, format {result.format_rate:.2f}, worker tokens "
            f"{result.worker_tokens_per_rollout:,.0f} ({result.domain_worker_tokens:,.0f} over domains)  ({note})")


def log_line(row: dict[str, Any]) -> str:
    """A step's line; a judge's calls and $ per rollout (judged kinds) follow, apart from the workers' ``$``, then
    what the run has spent (workers and judge, every segment) and its cost forecast (conductor/cost_forecast.py)."""
    parts = [f"step {row['step']:>4} v{row['version']:<4}"]
    parts += [f"{label} {fmt.format(row[key])}" for key, label, fmt in LOG_FIELDS if key in row]
    if row.get("judge_calls_per_rollout"):
        parts.append(f"judge {row['judge_calls_per_rollout']:.2f} calls {row['judge_tokens_per_rollout']:.0f} tok "
                     f"${row['judge_cost_usd_per_rollout']:.5f}")
    if "spent_usd" in row:
        parts.append(f"spent ${row['spent_usd']:.4f}")
    if "forecast_usd" in row:
        parts.append(f"forecast ${row['forecast_usd']:.4f} (${row['forecast_low_usd']:.4f}-"
                     f"${row['forecast_high_usd']:.4f})")
    if row.get("infra_errors"):
        parts.append(f"infra {row['infra_errors']}")
    return " | ".join(parts)


class StepProgress:
    def __init__(self, progress: Progress, bar: Any):
        self.progress, self.bar = progress, bar

    def update(self, completed: int, status: str) -> None:
        self.progress.update(self.bar, completed=completed, status=status)


@contextlib.contextmanager
def progress_bar(console: Console, total: int, completed: int) -> Iterator[StepProgress]:
    """The GRPO progress bar under the per-step log lines: steps, elapsed, eta, a status."""
    columns = (TextColumn("GRPO"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("eta"),
               TimeRemainingColumn(), TextColumn("{task.fields[status]}"))
    with Progress(*columns, console=console) as progress:
        yield StepProgress(progress, progress.add_task("grpo", total=total, completed=completed, status=""))


class DashboardMetrics:
    """The driver's metrics on the Ray dashboard / Prometheus endpoint (``ray_conductor_train_*``, defined
    in conductor/metrics.py): the last step's figures, the phase, staleness, queue depth and faults."""

    def __init__(self, run_name: str):
        from conductor.metrics import DRIVER_GAUGES, Families, PhaseGauge

        self.families = Families("conductor_train", run=run_name)
        self.keys = DRIVER_GAUGES
        self.phase = PhaseGauge(self.families)

    def update(self, values: dict[str, Any]) -> None:
        for key in self.keys:
            if key in values:
                self.families.set(f"conductor_train_{key}", values[key])
        if "max_lag" in values:
            self.families.set("conductor_train_staleness", values["max_lag"])

    def queue(self, depth: int) -> None:
        self.families.set("conductor_train_queue_depth", depth)

    def fault(self, kind: str, count: int) -> None:
        self.families.inc("conductor_train_faults_total", count, kind=kind)


def results_table(summary: dict[str, Any]) -> Table:
    """Accuracy over scored questions; the unscored (infrastructure errors) are a column of their own."""
    missing = [name for name, applied in summary.get("sandbox_isolation", {}).items() if not applied]
    caption = f"code sandbox: missing layers {', '.join(missing)}" if missing else "code sandbox: every layer applied"
    table = Table(title=f"held-out accuracy ({summary['heldout_questions']} questions)", caption=caption)
    table.add_column("policy")
    table.add_column("accuracy", justify="right")
    table.add_column("unscored", justify="right")
    infra = summary.get("baseline_infra_errors", {})
    table.add_row("trained Conductor", f"{summary['heldout_accuracy']:.3f}",
                  str(summary.get("heldout_infra_errors", 0)))
    for worker, value in summary["single_worker_accuracy"].items():
        table.add_row(f"single worker: {worker}", f"{value:.3f}", str(infra.get(worker, 0)))
    table.add_row("random router", f"{summary['random_router_accuracy']:.3f}", str(infra.get("random", 0)))
    table.add_row("per-domain table (each domain's best worker here)", f"{summary['domain_table_accuracy']:.3f}",
                  "")
    table.add_row("margin over best single", f"{summary['margin_over_best_single']:+.3f}", "")
    return table


def write_plot(history: Sequence[dict[str, Any]], evals: Sequence[dict[str, Any]], baselines: dict[str, float],
               path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5))
    steps = [row["step"] for row in history]
    axis.plot(steps, [row["mean_reward"] for row in history], label="mean reward (sampled)", alpha=0.5)
    axis.plot(steps, [row["accuracy"] for row in history], label="pass rate (sampled)", alpha=0.5)
    if evals:
        axis.plot([e["step"] for e in evals], [e["val_accuracy"] for e in evals], "o-", label="validation accuracy")
    axis.axhline(baselines["best_single"], linestyle="--", color="gray", label="best single worker (held-out)")
    axis.axhline(baselines["random"], linestyle=":", color="gray", label="random router (held-out)")
    axis.axhline(baselines["domain_table"], linestyle="-.", color="gray", label="per-domain table (held-out)")
    axis.set_xlabel("GRPO step")
    axis.set_ylim(0, 1.02)
    axis.legend(loc="lower right", fontsize=8)
    axis.set_title("Conductor training")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def heldout_summary(heldout: Any, tasks: Sequence[Any]) -> dict[str, Any]:
    """The held-out evaluation's part of ``summary.json`` (``heldout``: a RolloutStats); its mean score only
    where a graded reward scored it."""
    figures = {"heldout_accuracy": heldout.accuracy, "heldout_format_rate": heldout.format_rate,
               "heldout_questions": len(tasks), "heldout_infra_errors": heldout.infra_errors,
               "heldout_scored": heldout.rollouts - heldout.infra_errors,  # a dial run scores each at 3 settings
               "heldout_question_ids": [t.id for t in tasks],
               **{f"heldout_judge_{figure}": getattr(heldout, f"judge_{figure}_per_rollout") * heldout.rollouts
                  for figure in ("calls", "tokens", "cost_usd")}}
    if heldout.mean_score is not None:
        figures["heldout_mean_score"] = heldout.mean_score
    return figures


def judge_summary(history: Sequence[dict[str, Any]]) -> dict[str, float]:
    """What a judge spent grading the trained steps' rollouts (judged kinds; 0 otherwise): ``summary.json``'s
    ``judge_calls``, ``judge_tokens``, ``judge_cost_usd``, apart from the workers' figures."""
    return {f"judge_{figure}": sum(row.get(f"judge_{figure}_per_rollout", 0.0) * row.get("rollouts", 0)
                                   for row in history) for figure in ("calls", "tokens", "cost_usd")}


def baseline_summary(baselines: dict[str, dict[str, float]]) -> dict[str, Any]:
    """The baselines' part of ``summary.json``: every single worker, the best of them, the random router, the
    per-domain table (conductor/baselines.py). Accuracy is over the held-out questions, as
    ``heldout_accuracy`` is; the ``*_domain_*`` figures average each domain's accuracy over domains, as the
    evaluation report's ``average`` does, so they name its best single worker on the same split and pool
    (ties go to the earlier worker in the pool's order, in both)."""
    routers = {name: stats for name, stats in baselines.items() if name != DOMAIN_TABLE}
    single = {name: stats["accuracy"] for name, stats in routers.items() if name != RANDOM}
    over_domains = {name: stats["domain_accuracy"] for name, stats in routers.items() if name != RANDOM}
    best, best_over_domains = max(single, key=single.get), max(over_domains, key=over_domains.get)
    return {"best_single_accuracy": single[best], "best_single_worker": best, "single_worker_accuracy": single,
            "best_single_domain_accuracy": over_domains[best_over_domains],
            "best_single_domain_worker": best_over_domains, "single_worker_domain_accuracy": over_domains,
            "random_router_accuracy": baselines[RANDOM]["accuracy"],
            "domain_table_accuracy": baselines[DOMAIN_TABLE]["accuracy"],
            "baseline_infra_errors": {name: int(stats["infra_errors"]) for name, stats in routers.items()}}


def print_baselines(console: Console, baselines: Baselines) -> None:
    """The held-out baselines' line: the best single worker and the random router, whether they were kept
    from the run before (resumed: nothing spent), why they were measured again, and their infra errors."""
    figures = baseline_summary(baselines.figures)
    kept = " (kept from the run before: nothing spent)" if baselines.kept else ""
    console.print(f"held-out baselines{kept}: best single {figures['best_single_accuracy']:.3f}, "
                  f"random router {figures['random_router_accuracy']:.3f}")
    if baselines.note:
        console.print(f"[yellow]held-out baselines measured again: {baselines.note}[/]")
    warn_infra_errors(console, "held-out baselines", sum(figures["baseline_infra_errors"].values()))


def unscored_summary(state: Any) -> dict[str, int]:
    """The infrastructure errors of training's sampled rollouts and of every validation, beside the held-out
    ones: unscored episodes (a worker outage, a refused sandbox, a reward that could not judge)."""
    return {"train_rollouts": sum(row.get("rollouts", 0) for row in state.history),
            "train_infra_errors": sum(row.get("infra_errors", 0) for row in state.history),
            "val_infra_errors": sum(row.get("val_infra_errors", 0) for row in state.evals)}


def write_summary(out: RunOutput, summary: dict[str, Any]) -> str:
    out.write_text("summary.json", text=json.dumps(summary, indent=2, sort_keys=True))
    return out.path("summary.json")


def warn_local_output(out: RunOutput, nodes: int, console: Console) -> None:
    """Ranks and engines on other nodes write and read the run's files: a local path must be shared."""
    if not out.remote and nodes > 1:
        console.print(f"[yellow]output.dir is a local path ({out.url}) on a {nodes}-node cluster: learner ranks "
                      "and engines on other nodes write checkpoints and read the policy there. Use s3:// or "
                      "storage every node mounts at that path.[/]")


def warn_infra_errors(console: Console, what: str, count: int) -> None:
    """Infra errors are excluded from accuracy, so they shrink its denominator: say so, loudly."""
    if count:
        console.print(f"[yellow]{what}: {count} question(s) unscored (infrastructure errors: worker outages, "
                      "a sandbox that refused to run or a reward that could not judge); accuracy is over the rest[/]")


def best_validation(state: Any, train: Any) -> dict[str, Any]:
    """The validation figures of the checkpoint that was kept, on the basis it was chosen and budget-checked
    on (``train.val_average``: each domain's mean, averaged, or the questions pooled); none when no
    validation ran."""
    row = next((e for e in state.evals if e["step"] == state.best_step), {})
    prefix = "val_domain_" if train.val_average == "domains" and "val_domain_accuracy" in row else "val_"
    return {f"best_val_{figure}": row.get(prefix + figure) for figure in ("accuracy", "reward", "worker_tokens")}


def phases_line(name: str, phases: dict[str, float]) -> str:
    """``setup: warm_start 12.3 s, baselines 4.0 s, ...``: where a run's fixed time went."""
    return f"{name}: " + ", ".join(f"{phase} {seconds:.1f} s" for phase, seconds in phases.items())


def run_summary(config: Any, state: Any, heldout: Any, heldout_tasks: Sequence[Any],
                baselines: dict[str, dict[str, float]], out: RunOutput, **facts: Any) -> dict[str, Any]:
    """summary.json's content (docs/architecture.md lists the keys): the held-out result against the
    baselines, what the loop did (``state``: steps, best, rollbacks, faults) and the driver's ``facts``
    (exported policy, engine versions, chaos kills, wall time, store); draws curve.png when asked."""
    from conductor.verifiers.sandbox import host_isolation

    figures = baseline_summary(baselines)
    summary = {
        "run_name": config.run_name, **heldout_summary(heldout, heldout_tasks), **figures,
        "margin_over_best_single": heldout.accuracy - figures["best_single_accuracy"],
        "sandbox_isolation": host_isolation(), "code_isolation_required": config.verifier.require_code_isolation,
        "steps": state.step, "best_step": state.best_step, "best_by": config.train.best_by,
        **best_validation(state, config.train),
        **unscored_summary(state), "rollbacks": state.rollbacks, "policy_version": state.version,
        "max_staleness": config.train.max_staleness, "replayable": config.train.replayable,
        "faults": dict(sorted(state.faults.items())),
        "grpo_seconds": state.wall_seconds, **run_throughput(state.history, state.wall_seconds),
        **judge_summary(state.history), **facts}
    if config.train.plot and state.history:
        write_plot(state.history, state.evals, {"best_single": figures["best_single_accuracy"],
                                                "random": figures["random_router_accuracy"],
                                                "domain_table": figures["domain_table_accuracy"]},
                   out.staged("curve.png"))
        summary["curve_png"] = out.publish("curve.png")
    return summary
