"""What a recursive round did to the answer before it, per domain (issue 36, scope 4).

A Conductor row ``X_recursive`` is read beside its root-only row ``X``: the same checkpoint, decoded greedily,
so its root round is ``X``'s and ``X``'s verdict on a question is the root answer's. Per domain, over the
questions both scored:

- ``accept_when_right``: the share of questions with a right root answer whose recursive turn accepted it
  (three empty lists). Anything else re-runs a workflow that can only keep or lose the point;
- ``accept_when_wrong``: the same over wrong root answers (accepting one is a repair not tried);
- ``broken`` (right, then wrong) and ``repaired`` (wrong, then right): questions the recursive round changed.

``X_recursive`` minus ``X`` is (repaired - broken) / questions: this says where the difference comes from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from conductor.evaluation.outcome import Outcome

SUFFIX = "_recursive"


def recursion_stats(outcomes: Sequence[Outcome]) -> dict[str, dict[str, dict[str, Any]]]:
    """{recursive method: {domain: stats}} for each ``X_recursive`` whose ``X`` is among the outcomes."""
    by_method: dict[str, dict[tuple[str, int], Outcome]] = defaultdict(dict)
    for o in outcomes:
        by_method[o.method][(o.task_id, o.repeat)] = o
    stats: dict[str, dict[str, dict[str, Any]]] = {}
    for method, recursive in sorted(by_method.items()):
        root = by_method.get(method.removesuffix(SUFFIX)) if method.endswith(SUFFIX) else None
        if not root:
            continue
        pairs: dict[str, list[tuple[Outcome, Outcome]]] = defaultdict(list)
        for key, second in recursive.items():
            first = root.get(key)
            if first is not None and first.correct is not None and second.correct is not None:
                pairs[first.domain].append((first, second))
        stats[method] = {domain: _stats(rows) for domain, rows in sorted(pairs.items())}
        stats[method]["all"] = _stats([pair for rows in pairs.values() for pair in rows])
    return stats


def _stats(pairs: list[tuple[Outcome, Outcome]]) -> dict[str, Any]:
    right = [second for first, second in pairs if first.correct]
    wrong = [second for first, second in pairs if not first.correct]
    return {
        "questions": len(pairs),
        "root_right": len(right),
        "accept_when_right": sum(o.accepted for o in right) / len(right) if right else None,
        "accept_when_wrong": sum(o.accepted for o in wrong) / len(wrong) if wrong else None,
        "broken": sum(not o.correct for o in right),
        "repaired": sum(bool(o.correct) for o in wrong),
    }


def markdown_lines(stats: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    if not stats:
        return []

    def share(value: Any) -> str:
        return "—" if value is None else f"{100 * value:.1f}%"

    lines = ["", "## What the recursive round did to the root answer", "",
             "Each recursive row beside its root-only row (the same checkpoint, greedy: the same root round). "
             "Accepting is writing three empty lists; broken: right, then wrong; repaired: wrong, then right.", "",
             "| method | domain | questions | root right | accepted when right | accepted when wrong | broken "
             "| repaired | net |", "|---|---|---|---|---|---|---|---|---|"]
    for method, domains in stats.items():
        for domain, row in domains.items():
            lines.append(f"| {method} | {domain} | {row['questions']} | {row['root_right']} | "
                         f"{share(row['accept_when_right'])} | {share(row['accept_when_wrong'])} | {row['broken']} | "
                         f"{row['repaired']} | {row['repaired'] - row['broken']:+d} |")
    return lines
