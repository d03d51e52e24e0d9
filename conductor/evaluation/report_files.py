"""The evaluation's files: ``outcomes.parquet`` (one row per attempt), ``report.json`` (the summary, for other
tools), ``report.md`` (the table, and the side-by-side with the paper when the domains match: Table 7 in-domain,
Table 2 on the unseen task types, conductor/evaluation/unseen_report.py; what a judge spent, where one graded
answers) and two PNGs: accuracy against $ per
question with every method on it, and steps per workflow by domain.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import pyarrow as pa
import pyarrow.parquet as pq

from conductor.evaluation.conductor_method import is_conductor
from conductor.evaluation.outcome import Outcome
from conductor.evaluation.paper_reference import DOMAINS, PAPER, SELF_REFLECTION_GAIN, TOLERANCE
from conductor.evaluation.recursion_stats import markdown_lines as recursion_lines
from conductor.evaluation.recursion_stats import recursion_stats
from conductor.evaluation.report import AVERAGE, Cell, as_json, best_of, graded
from conductor.evaluation.unseen_report import unseen_json, unseen_sections
from conductor.evaluation.workflow_stats import markdown_lines, workflow_stats

FILES = ("outcomes.parquet", "report.json", "report.md", "accuracy_cost.png", "steps_by_domain.png")


def write_report(directory: Path, outcomes: Sequence[Outcome], table: dict[str, dict[str, Cell]],
                 meta: dict[str, Any], provenance: Optional[dict[bytes, bytes]] = None) -> list[Path]:
    """``provenance``: the outcomes file's metadata (conductor/evaluation/outcome_provenance.py)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / name for name in FILES]
    rows = pa.Table.from_pylist([o.row() for o in outcomes])
    pq.write_table(rows.replace_schema_metadata({**(rows.schema.metadata or {}), **(provenance or {})}), paths[0])
    workflows = workflow_stats(outcomes, is_conductor)
    recursion = recursion_stats(outcomes)
    paths[1].write_text(json.dumps({**as_json(table, meta), "workflows": workflows, "recursion": recursion,
                                    **unseen_json(table, outcomes)}, indent=2) + "\n")
    figures = ["", f"![accuracy against $ per question]({FILES[3]})", "",
               f"![steps per workflow by domain]({FILES[4]})", ""]
    sections = (judge_lines(table) + conductor_comparison(table) + unseen_sections(table, outcomes, meta)
                + markdown_lines(workflows) + recursion_lines(recursion))
    paths[2].write_text(markdown(table, meta) + "\n".join(sections + figures))
    plot_accuracy_cost(table, paths[3])
    plot_steps(outcomes, paths[4])
    return paths


def _pct(value: float) -> str:
    return "—" if value is None or math.isnan(value) else f"{100 * value:.2f}"


def _score(value: float | None) -> str:
    return "—" if value is None else f"{value:.3f}"


def markdown(table: dict[str, dict[str, Cell]], meta: dict[str, Any]) -> str:
    domains = sorted({d for cells in table.values() for d in cells if d != AVERAGE})
    lines = [f"# Evaluation: {meta.get('title', 'methods on the pool')}", ""]
    if meta.get("command"):
        lines += ["Made by:", "", f"    {meta['command']}", ""]
    lines += [f"{meta.get('questions', '?')} questions ({', '.join(domains)}), {meta.get('repeats', 1)} repeat(s). "
              "Accuracy in % ± s.e. over questions; calls, tokens, $ and latency are means per question. "
              f"{meta.get('note', '')}".rstrip(), ""]
    scores = graded(table)  # a graded reward: its mean score (over scored attempts, 0 to 1) beside accuracy
    header = ["method", *domains, AVERAGE, *(["mean score"] if scores else []), "calls", "worker tokens",
              "conductor tokens", "$ / question", "latency s", "steps", "infra errors"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, cells in table.items():
        avg = cells[AVERAGE]
        row = [name] + [f"{_pct(cells[d].accuracy)} ± {_pct(cells[d].se)}" if d in cells else "" for d in domains]
        row += [f"{_pct(avg.accuracy)}", *([_score(avg.mean_score)] if scores else []), f"{avg.worker_calls:.2f}",
                f"{avg.worker_tokens:,.0f}", f"{avg.conductor_tokens:,.0f}", f"{avg.usd:.5f}", f"{avg.latency_s:.3f}",
                f"{avg.steps:.2f}", str(avg.infra_errors)]
        lines.append("| " + " | ".join(row) + " |")
    if set(DOMAINS) <= set(domains):
        lines += ["", *paper_comparison(table)]
    return "\n".join(lines) + "\n"


def judge_lines(table: dict[str, dict[str, Cell]]) -> list[str]:
    """What the judge spent grading each method's answers (judged kinds; none: no section), per question."""
    judged = {name: cells[AVERAGE] for name, cells in table.items() if cells[AVERAGE].judge_calls > 0}
    if not judged:
        return []
    lines = ["## The judge", "", "Grading the answers of judged tasks (`verifier: judge`), means per question; not in "
             "the calls, tokens and $ above, which are the workers'. An answer graded once is not paid for again.",
             "", "| method | judge calls | judge tokens | judge $ / question |", "|---|---|---|---|"]
    lines += [f"| {name} | {cell.judge_calls:.2f} | {cell.judge_tokens:,.0f} | {cell.judge_usd:.5f} |"
              for name, cell in judged.items()]
    return lines + [""]


def paper_comparison(table: dict[str, dict[str, Cell]]) -> list[str]:
    """The issue's calibration checks: best single per domain, MoA and best self-reflection against the paper."""
    lines = ["## Against the paper (Table 7, constrained in-domain)", "",
             "| figure | " + " | ".join(DOMAINS) + " | within ±3 (or 2 s.e.) |", "|---|" + "---|" * (len(DOMAINS) + 1)]
    for label, prefix, reference in (("best single worker", "single:", PAPER["best_single"]),
                                     ("MoA", "moa", PAPER["moa"])):
        found = [best_of(table, prefix, d) for d in DOMAINS]
        if not all(found):
            continue
        diffs = [100 * f[1].accuracy - reference[d] for f, d in zip(found, DOMAINS)]
        cells = [f"{100 * f[1].accuracy:.2f} ± {100 * f[1].se:.2f} vs {reference[d]:.2f} ({diff:+.2f})"
                 for f, d, diff in zip(found, DOMAINS, diffs)]
        # a sample of the items (a split) also carries sampling error: within ±3 or within 2 s.e.
        within = "yes" if all(abs(diff) <= max(TOLERANCE, 200 * f[1].se) for f, diff in zip(found, diffs)) else "NO"
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {within} |")
    reflection = [name for name in table if name.startswith("self_reflection:")]
    if reflection:
        best = max(reflection, key=lambda n: table[n][AVERAGE].accuracy)
        single = table.get("single:" + best.partition(":")[2])
        if single:
            gain = 100 * (table[best][AVERAGE].accuracy - single[AVERAGE].accuracy)
            lines.append(f"| best 5x self-reflection ({best}) over the same worker, average | "
                         f"{gain:+.2f} vs paper {SELF_REFLECTION_GAIN:+.2f} | | | "
                         f"{'yes' if abs(gain - SELF_REFLECTION_GAIN) <= TOLERANCE else 'NO'} |")
    return lines + [""] if len(lines) > 4 else []  # no figure to compare (say, a Conductor alone): no section


def conductor_comparison(table: dict[str, dict[str, Cell]]) -> list[str]:
    """Each Conductor method against the best single worker of each domain and of the average, its steps,
    and its worker tokens as a share of MoA's (all unweighted over domains, as the table)."""
    conductors = [name for name in table if is_conductor(name)]
    best_average = best_of(table, "single:", AVERAGE)
    if not conductors or best_average is None:
        return []
    domains = [d for d in table[conductors[0]] if d != AVERAGE]
    lines = ["## The Conductor against the best single worker of each domain", "",
             "| method | " + " | ".join(domains) + f" | {AVERAGE} | steps per domain | worker tokens vs MoA |",
             "|---|" + "---|" * (len(domains) + 3)]
    for name in conductors:
        cells = []
        for domain in [*domains, AVERAGE]:
            best = best_average if domain == AVERAGE else best_of(table, "single:", domain)
            diff = 100 * (table[name][domain].accuracy - best[1].accuracy)
            cells.append(f"{_pct(table[name][domain].accuracy)} vs {best[0].partition(':')[2]} "
                         f"{_pct(best[1].accuracy)} ({diff:+.2f})")
        steps = ", ".join(f"{d} {table[name][d].steps:.2f}" for d in domains)
        moa = table.get("moa", {}).get(AVERAGE)
        share = f"{table[name][AVERAGE].worker_tokens / moa.worker_tokens:.3f}x" if moa else "—"
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {steps} | {share} |")
    return lines + [""]


def plot_accuracy_cost(table: dict[str, dict[str, Cell]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 5.5))
    for name, cells in table.items():
        avg = cells[AVERAGE]
        conductor = is_conductor(name)
        axis.scatter(max(avg.usd, 1e-7), 100 * avg.accuracy, marker="*" if conductor else "o",
                     s=160 if conductor else 36, zorder=3)
        axis.annotate(name, (max(avg.usd, 1e-7), 100 * avg.accuracy), fontsize=7, xytext=(4, 2),
                      textcoords="offset points")
    axis.set_xscale("log")
    axis.set_xlabel("$ per question (log scale)")
    axis.set_ylabel("accuracy, % (mean over domains)")
    axis.set_title("Accuracy against cost")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def plot_steps(outcomes: Sequence[Outcome], path: Path) -> None:
    """Steps per workflow by domain, for the conductor methods (every method if there is none)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [o for o in outcomes if o.method.startswith("conductor")] or list(outcomes)
    methods = list(dict.fromkeys(o.method for o in chosen))[:8]
    domains = sorted({o.domain for o in chosen})
    figure, axes = plt.subplots(1, max(1, len(domains)), figsize=(4 * max(1, len(domains)), 3.6), squeeze=False)
    for axis, domain in zip(axes[0], domains):
        width = 0.8 / max(1, len(methods))
        for k, method in enumerate(methods):
            counts = Counter(o.steps for o in chosen if o.domain == domain and o.method == method)
            total = sum(counts.values()) or 1
            xs = sorted(counts)
            axis.bar([x + k * width for x in xs], [counts[x] / total for x in xs], width, label=method)
        axis.set_title(domain)
        axis.set_xlabel("steps per workflow")
        axis.set_ylabel("share of questions")
    axes[0][0].legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
