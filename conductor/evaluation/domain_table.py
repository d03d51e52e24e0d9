"""The per-domain table as a method, on questions of types it may have no row for (issue 36).

The table is a run's own measured warm-start menu (``sft/workflow_prior.json``: per domain, each worker alone
and each "A solves, B checks" pair, weighted by a softmax of its measured reward; or ``worker_prior.json``,
workers alone): each domain goes to its heaviest item, which is what the Conductor was warm-started towards. A
domain the table has a row for copies that row's outcomes (``single:<w>`` or ``solve_check:<a>><b>``, evaluated
as ordinary methods: no new calls, no new Method class). A domain it has no row for (an unseen task type) takes
the *best* of its fallbacks on that domain: its own rows and its generalist. That choice is made on the scored
items themselves, so the derived ``domain_table`` row is an optimistic upper bound for a table.

The generalist is the non-optimistic fallback, chosen from training measurements only: the worker alone with
the highest measured reward averaged over the table's domains. Within a domain the singles share one shape
weight, so ``T ln weight`` is the reward up to a per-domain constant, and the argmax of the summed log weights
is the argmax of the mean reward.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Optional

import fsspec

from conductor.evaluation.outcome import Outcome
from conductor.evaluation.registry import MethodSpec

NAME = "domain_table"
SPECS = (MethodSpec(NAME, None),)  # derived here from its rows' outcomes, which cluster/evaluate.py adds
Table = dict[str, dict[str, float]]  # domain -> item ("w" or "a>b") -> weight


def read_table(path: str, storage_options: Optional[dict[str, Any]] = None) -> Table:
    with fsspec.open(path, "r", **(storage_options or {})) as handle:
        table = json.load(handle)
    if not isinstance(table, dict) or not all(isinstance(items, dict) and items for items in table.values()):
        raise ValueError(f"evaluate.domain_table: {path} is not a per-domain prior ({{domain: {{item: weight}}}})")
    return table


def method_of(item: str) -> str:
    """The evaluation's method for a menu item: ``single:w``, or ``solve_check:a>b`` (ids hold no '>')."""
    return f"solve_check:{item}" if ">" in item else f"single:{item}"


def table_rows(table: Table) -> dict[str, str]:
    """domain -> the method of its heaviest item (ties: the first in sorted order)."""
    return {domain: method_of(min(items, key=lambda item: (-items[item], item))) for domain, items in table.items()}


def generalist(table: Table) -> Optional[str]:
    """``single:w`` for the worker alone with the highest summed log weight over the domains, among the workers
    measured alone in every domain (the rule in the module docstring); None if there is none."""
    singles = [set(w for w in items if ">" not in w) for items in table.values()]
    everywhere = sorted(set.intersection(*singles)) if singles else []
    if not everywhere:
        return None
    score = {w: sum(math.log(max(items[w], 1e-300)) for items in table.values()) for w in everywhere}
    return method_of(max(everywhere, key=lambda w: score[w]))


def fallback_methods(table: Table) -> list[str]:
    """The methods the derived row may copy: the table's rows, then its generalist, each once."""
    return list(dict.fromkeys([*table_rows(table).values(), *filter(None, [generalist(table)])]))


def with_domain_table(outcomes: Sequence[Outcome], table: Table) -> tuple[list[Outcome], dict[str, dict[str, str]]]:
    """The outcomes plus the derived rows, and per domain the method copied and why (its ``row``, or its ``best
    fallback``; ties go to the first fallback)."""
    rows, candidates = table_rows(table), fallback_methods(table)
    by_method: dict[str, dict[str, list[Outcome]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        by_method[o.method][o.domain].append(o)
    derived, chosen = [], {}
    for domain in sorted({o.domain for o in outcomes}):
        if domain in rows:
            method, how = rows[domain], "row"
        else:
            found = [m for m in candidates if by_method[m][domain]]
            if not found:
                raise ValueError(f"domain_table: none of its fallbacks ({', '.join(candidates)}) was evaluated "
                                 f"on {domain}")
            method = max(found, key=lambda m: (_mean_correct(by_method[m][domain]), -found.index(m)))  # ties: first
            how = "best fallback, chosen on these items"
        if not by_method[method][domain]:
            raise ValueError(f"domain_table: its row for {domain}, {method}, was not evaluated")
        derived += [replace(o, method=NAME) for o in by_method[method][domain]]
        chosen[domain] = {"method": method, "how": how}
    return list(outcomes) + derived, chosen


def _mean_correct(outcomes: Sequence[Outcome]) -> float:
    scored = [o.correct for o in outcomes if o.correct is not None]
    return sum(scored) / len(scored) if scored else -1.0
