"""What the workflows a method wrote look like, per domain: steps, workers, access-list shapes, recursion.

Fixed methods always run the same shape, so this matters for the methods that write their own workflows
(the Conductor's). Per (method, domain) over its attempts:

- ``steps``: mean steps per question (all rounds), and the histogram of steps;
- ``workers``: each worker's share of all steps, and the mean distinct workers per question;
- ``shapes``: the access-list shapes written (each step's list, in order: ``[] → all``), share of questions;
- ``top_workflows``: the most common workflows as ``worker(access) → ...``, share of questions;
- ``recursion``: share of questions that ran more than one round, and ``recursive_turns_unparsed``: share
  whose recursive turn was not a workflow (the root's answer stood);
- ``parse_errors``: share whose root output was not a workflow (a wrong answer), and ``parse_error_reasons``:
  each reason's share (``missing_list``, ``truncated``, ...), so a format failure reads as its cause: an
  untrained model that answers instead of planning is not one that runs out of tokens.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from typing import Any

from conductor.evaluation.outcome import RECURSIVE_TURN, Outcome

TOP = 5


def workflow_stats(outcomes: Iterable[Outcome],
                   include: Callable[[str], bool]) -> dict[str, dict[str, dict[str, Any]]]:
    """{method: {domain: stats}} for the methods ``include`` accepts."""
    grouped: dict[str, dict[str, list[Outcome]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        if include(o.method):
            grouped[o.method][o.domain].append(o)
    return {method: {domain: _stats(rows) for domain, rows in sorted(by_domain.items())}
            for method, by_domain in grouped.items()}


def _stats(rows: list[Outcome]) -> dict[str, Any]:
    n = len(rows)
    worker_steps = Counter(w for o in rows for w in o.workers)
    total_steps = sum(worker_steps.values()) or 1
    shapes = Counter(" → ".join(o.access) or "(none)" for o in rows)
    workflows = Counter(" → ".join(f"{w}({a})" for w, a in zip(o.workers, o.access)) or "(none)" for o in rows)
    errors = [o.parse_error for o in rows if o.parse_error]
    root_errors = [e for e in errors if not e.startswith(RECURSIVE_TURN)]
    return {
        "questions": n,
        "steps": sum(o.steps for o in rows) / n,
        "steps_histogram": dict(sorted(Counter(o.steps for o in rows).items())),
        "workers": {w: c / total_steps for w, c in worker_steps.most_common()},
        "distinct_workers": sum(len(set(o.workers)) for o in rows) / n,
        "shapes": {s: c / n for s, c in shapes.most_common(TOP)},
        "top_workflows": {w: c / n for w, c in workflows.most_common(TOP)},
        "recursion": sum(o.rounds > 1 for o in rows) / n,
        "recursive_turns_unparsed": (len(errors) - len(root_errors)) / n,
        "parse_errors": len(root_errors) / n,
        "parse_error_reasons": {r: c / n for r, c in Counter(root_errors).most_common()},
    }


def markdown_lines(stats: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    lines: list[str] = []
    for method, by_domain in stats.items():
        lines += [f"## Workflows written by `{method}`", "",
                  "| domain | steps | steps histogram | distinct workers | recursion | parse errors | "
                  "access shapes (share) | most common workflows (share) |", "|---|---|---|---|---|---|---|---|"]
        for domain, s in by_domain.items():
            histogram = ", ".join(f"{k}: {v}" for k, v in s["steps_histogram"].items())
            shapes = "; ".join(f"`{k}` {v:.0%}" for k, v in s["shapes"].items())
            flows = "; ".join(f"`{k}` {v:.0%}" for k, v in list(s["top_workflows"].items())[:3])
            reasons = ", ".join(f"{k} {v:.0%}" for k, v in s["parse_error_reasons"].items())
            parse_errors = f"{s['parse_errors']:.0%}" + (f" ({reasons})" if reasons else "")
            unparsed = s["recursive_turns_unparsed"]
            recursion = f"{s['recursion']:.0%}" + (f" (turn not a workflow: {unparsed:.0%})" if unparsed else "")
            lines.append(f"| {domain} | {s['steps']:.2f} | {histogram} | {s['distinct_workers']:.2f} | "
                         f"{recursion} | {parse_errors} | {shapes} | {flows} |")
        lines.append("")
    return lines
