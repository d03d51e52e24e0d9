"""The report's sections for the task types nothing trained on (``evaluate.split=unseen``; issue 36, scope 3).

1. **Calibration**: each worker's measured accuracy per type against the figure it was calibrated to, which is
   assumed (conductor/simulator/unseen.py): exact to half an item on the full sets, so a canonical MBPP answer
   that failed, or a wrong one that passed, shows here.
2. **Per type**: accuracy ± s.e. and worker tokens per type, for every method.
3. **The criterion**, per Conductor row: above the best single worker on the types' average, and on no type
   below that type's best single worker by more than one s.e. The s.e. is the Conductor cell's (as the issue
   words it); the best single worker's and the paired s.e. of the per-question difference are printed beside
   it, and a verdict that differs under either is flagged.
4. **Against the paper's Table 2**: the gain over the best single worker, ours and the paper's.
5. **The per-domain table**: the fallback it took per type (chosen on these items: an optimistic upper bound),
   beside its generalist (chosen from training measurements alone).
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Optional

from conductor.evaluation.conductor_method import is_conductor
from conductor.evaluation.outcome import Outcome
from conductor.evaluation.paper_reference import TABLE2, UNSEEN_DOMAINS, UNSEEN_LABELS
from conductor.evaluation.report import AVERAGE, Cell, best_of
from conductor.simulator.unseen import left_out


def caveats() -> list[str]:
    """``CAVEATS``, with the items the paper-7 preset's unseen entries leave out and why (read from its YAML)."""
    assumed, like, untrained = CAVEATS
    for name, reasons in left_out().items():
        like += (f" {name.upper()} items left out (not counted unsolvable): "
                 + "; ".join(f"{value}: {why}" for value, why in reasons.items()) + ".")
    return [assumed, like, untrained]


CAVEATS = [
    "**Per-worker accuracies on these types are assumed, not the paper's.** The paper's Table 2 gives only each "
    "type's best single worker (46.67 / 35.8 / 75.25). Each type's best worker here is anchored at that figure and "
    "every other worker keeps its ratio to the best in the nearest in-domain Table 7 column (MATH-500 for AIME, "
    "MMLU for GPQA, LCB for BigCodeBench); which worker is best on a type follows from that rule.",
    "\"-like\" is about the calibration only: the items are AIME 2024 (not 2025), 4-option MMLU physics and "
    "chemistry (not graduate-level GPQA) and MBPP sanitized (not BigCodeBench). MMLU astronomy, which MMLU's own "
    "taxonomy files under physics, is among paper-7's training rows: a near neighbour that the routers and the "
    "Conductor trained on alike.",
    "Nothing trained on these items: the Conductors and the routers learned on paper-7's train split. "
    "Evaluation is greedy and the simulated workers answer without a seed deterministically, so repeats add "
    "nothing; AIME's 30 items make one item 3.33 points and its s.e. about 9.",
]


def _pct(value: Optional[float]) -> str:
    return "—" if value is None or math.isnan(value) else f"{100 * value:.2f}"


def _per_question(outcomes: Sequence[Outcome], method: str, domain: str) -> dict[str, float]:
    scored: dict[str, list[bool]] = defaultdict(list)
    for o in outcomes:
        if o.method == method and o.domain == domain and o.correct is not None:
            scored[o.task_id].append(o.correct)
    return {task_id: sum(v) / len(v) for task_id, v in scored.items()}


def paired_se(outcomes: Sequence[Outcome], method: str, other: str, domain: str) -> float:
    """s.e. of the mean per-question difference ``method - other`` over the questions both scored."""
    mine, theirs = _per_question(outcomes, method, domain), _per_question(outcomes, other, domain)
    diffs = [mine[q] - theirs[q] for q in mine.keys() & theirs.keys()]
    return statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else math.nan


def criterion(table: dict[str, dict[str, Cell]], outcomes: Sequence[Outcome], method: str) -> dict[str, Any]:
    """Per type and on average: the difference to the best single worker, the three s.e.s, and the verdict."""
    result: dict[str, Any] = {}
    for domain in UNSEEN_DOMAINS:
        best, best_cell = best_of(table, "single:", domain)
        cell = table[method][domain]
        diff = cell.accuracy - best_cell.accuracy
        ses = {"conductor": cell.se, "best_single": best_cell.se, "paired": paired_se(outcomes, method, best, domain)}
        below = {name: bool(diff < -se) for name, se in ses.items() if not math.isnan(se)}
        result[domain] = {"best_single": best, "difference": diff, "se": ses,
                          "below_by_more_than_1se": below.get("conductor", False),
                          "differs_under": sorted(n for n, b in below.items() if b != below.get("conductor", False))}
    best, best_cell = best_of(table, "single:", AVERAGE)
    diff = table[method][AVERAGE].accuracy - best_cell.accuracy
    result[AVERAGE] = {"best_single": best, "difference": diff, "se": {"conductor": table[method][AVERAGE].se}}
    result["pass"] = diff > 0 and not any(result[d]["below_by_more_than_1se"] for d in UNSEEN_DOMAINS)
    return result


def unseen_json(table: dict[str, dict[str, Cell]], outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """``{"unseen_criterion": {conductor: criterion}}`` when the table holds the unseen types and singles."""
    if not _applies(table):
        return {}

    def clean(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return None if isinstance(value, float) and math.isnan(value) else value

    return {"unseen_criterion": {m: clean(criterion(table, outcomes, m)) for m in table if is_conductor(m)}}


def _applies(table: dict[str, dict[str, Cell]]) -> bool:
    domains = {d for cells in table.values() for d in cells}
    return set(UNSEEN_DOMAINS) <= domains and best_of(table, "single:", AVERAGE) is not None


def unseen_sections(table: dict[str, dict[str, Cell]], outcomes: Sequence[Outcome], meta: dict[str, Any]) -> list[str]:
    if not _applies(table):
        return []
    lines = ["", "## Task types nothing trained on", "", *[f"- {c}" for c in caveats()], ""]
    lines += _calibration(table, meta.get("unseen_calibration") or {})
    lines += ["### Per type", "", "| method | " + " | ".join(UNSEEN_LABELS[d] for d in UNSEEN_DOMAINS)
              + f" | {AVERAGE} | worker tokens per type | conductor tokens |", "|---|" + "---|" * 6]
    for name, cells in table.items():
        if not set(UNSEEN_DOMAINS) <= set(cells):
            continue
        accuracy = [f"{_pct(cells[d].accuracy)} ± {_pct(cells[d].se)}" for d in (*UNSEEN_DOMAINS, AVERAGE)]
        tokens = " / ".join(f"{cells[d].worker_tokens:,.0f}" for d in UNSEEN_DOMAINS)
        lines.append(f"| {name} | " + " | ".join(accuracy) + f" | {tokens} | {cells[AVERAGE].conductor_tokens:,.0f} |")
    lines.append("")
    conductors = [m for m in table if is_conductor(m) and set(UNSEEN_DOMAINS) <= set(table[m])]
    results = {m: criterion(table, outcomes, m) for m in conductors}
    lines += _criterion_lines(results) + _paper_lines(table, results) + _table_lines(table, meta.get("domain_table"))
    return lines


def _calibration(table: dict[str, dict[str, Cell]], assumed: dict[str, dict[str, float]]) -> list[str]:
    if not assumed:
        return []
    lines = ["### Calibration (assumed figures; exact to half an item on the full sets)", "",
             "| worker | " + " | ".join(f"{d}: measured vs assumed" for d in UNSEEN_DOMAINS) + " | within |",
             "|---|" + "---|" * (len(UNSEEN_DOMAINS) + 1)]
    for worker, figures in assumed.items():
        cells = table.get(f"single:{worker}")
        if not cells or not set(UNSEEN_DOMAINS) <= set(cells):
            continue
        gaps = [abs(cells[d].accuracy - figures[d]) <= 0.5 / cells[d].n + 1e-9 for d in UNSEEN_DOMAINS]
        lines.append(f"| {worker} | " + " | ".join(f"{_pct(cells[d].accuracy)} vs {_pct(figures[d])}"
                                                  for d in UNSEEN_DOMAINS) + f" | {'yes' if all(gaps) else 'NO'} |")
    return lines + [""]


def _criterion_lines(results: dict[str, dict[str, Any]]) -> list[str]:
    if not results:
        return []
    lines = ["### The criterion: above the best single worker on average, on no type below it by more than 1 s.e.",
             "", "| method | " + " | ".join(UNSEEN_DOMAINS) + f" | {AVERAGE} | verdict |", "|---|" + "---|" * 5]
    for name, result in results.items():
        cells = []
        for domain in UNSEEN_DOMAINS:
            r = result[domain]
            se = r["se"]
            flag = f" (differs under the {', '.join(r['differs_under'])} s.e.)" if r["differs_under"] else ""
            cells.append(f"{100 * r['difference']:+.2f} vs {r['best_single'].partition(':')[2]}; s.e. "
                         f"{_pct(se['conductor'])} (best single {_pct(se['best_single'])}, paired "
                         f"{_pct(se['paired'])}){' BELOW' if r['below_by_more_than_1se'] else ''}{flag}")
        average = result[AVERAGE]
        cells.append(f"{100 * average['difference']:+.2f} vs {average['best_single'].partition(':')[2]} "
                     f"(s.e. {_pct(average['se']['conductor'])})")
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {'PASS' if result['pass'] else 'FAIL'} |")
    return lines + [""]


def _paper_lines(table: dict[str, dict[str, Cell]], results: dict[str, dict[str, Any]]) -> list[str]:
    if not results:
        return []
    lines = ["### Against the paper's Table 2 (gain over the best single worker, points)", "",
             "| row | " + " | ".join(UNSEEN_DOMAINS) + f" | {AVERAGE} |", "|---|" + "---|" * 4]
    for kind in ("conductor", "conductor_recursive"):
        paper = TABLE2[kind]
        gains = [f"{paper[d] - TABLE2['best_single'][d]:+.2f}" if d in paper else "—" for d in UNSEEN_DOMAINS]
        average = (f"{statistics.fmean(paper[d] - TABLE2['best_single'][d] for d in UNSEEN_DOMAINS):+.2f}"
                   if set(UNSEEN_DOMAINS) <= set(paper) else "—")
        lines.append(f"| paper, {kind} | " + " | ".join(gains) + f" | {average} |")
    for name, result in results.items():
        gains = [100 * result[d]["difference"] for d in UNSEEN_DOMAINS]
        lines.append(f"| ours, {name} | " + " | ".join(f"{g:+.2f}" for g in (*gains, statistics.fmean(gains))) + " |")
    return lines + ["", f"(The {AVERAGE} here is the mean of the per-type gains, each over that type's best single "
                    "worker, for both rows; the criterion above takes the best single worker on the average.)", ""]


def _table_lines(table: dict[str, dict[str, Cell]], info: Optional[dict[str, Any]]) -> list[str]:
    if not info or "domain_table" not in table:
        return []
    rows = ", ".join(f"{d} → `{m}`" for d, m in info["rows"].items())
    lines = ["### The per-domain table", "", f"Its rows (`{info['path']}`): {rows}; its generalist: "
             f"`{info['generalist']}`. On a type it has no row for, the `domain_table` row takes its best fallback "
             "**chosen on these items: an optimistic upper bound**; the generalist is the fallback a table would "
             "take without seeing them.", "", "| type | fallback taken | domain_table | generalist |",
             "|---|---|---|---|"]
    generalist = table.get(info["generalist"] or "", {})
    for domain in UNSEEN_DOMAINS:
        chosen = info["chosen"].get(domain, {})
        cell = table["domain_table"].get(domain)
        fixed = generalist.get(domain)
        lines.append(f"| {domain} | `{chosen.get('method', '—')}`, {chosen.get('how', '—')} | "
                     f"{_pct(cell.accuracy if cell else None)} | {_pct(fixed.accuracy if fixed else None)} |")
    return lines + [""]
