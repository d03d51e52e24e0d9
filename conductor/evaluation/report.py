"""From outcome rows to the report: per method and domain, accuracy +- s.e., calls, tokens, $ and latency.

Accuracy counts scored attempts only (an infrastructure error is neither right nor wrong). With repeats,
each question's accuracy is its mean over repeats, and the s.e. is the standard error of the mean over
questions: ``se = stdev(per-question accuracy) / sqrt(n)``. Cost figures are means per question and
repeat. The ``average`` column is the unweighted mean over domains, as the paper averages its columns. A
judge's calls, tokens and $ (judged kinds) are means per question of their own, in no worker figure.

Where a plug-in reward (Python, a reward server, a judge) scored the attempts, a cell also has ``mean_score``: the mean
over its scored attempts with a score (accuracy counts 0.5 or more as right; the mean keeps the fractions),
and the average's is the unweighted mean over the domains that have one. Without graded scores it is None,
and neither report.json nor report.md shows it.

The ``oracle`` (right if any single worker is right) is derived from the ``single:*`` rows of the same
question and repeat: its calls, tokens and dollars are their sums, its latency their maximum, its score the
best of theirs.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from conductor.evaluation.outcome import Outcome
from conductor.evaluation.registry import MethodSpec

AVERAGE = "average"
SPECS = (MethodSpec("oracle", None, needs=("single",)),)  # derived here (with_oracle), from every single worker


@dataclass(frozen=True)
class Cell:
    accuracy: float
    se: float
    n: int  # questions with at least one scored attempt
    worker_calls: float
    worker_tokens: float
    conductor_tokens: float
    usd: float
    latency_s: float
    steps: float
    infra_errors: int
    judge_calls: float = 0.0
    judge_tokens: float = 0.0
    judge_usd: float = 0.0
    mean_score: Optional[float] = None  # graded rewards only (see above)

    def as_dict(self) -> dict[str, Any]:
        return dict(vars(self))


def graded(table: dict[str, dict[str, Cell]]) -> bool:
    """Any cell with a mean score: the report shows the column."""
    return any(cell.mean_score is not None for cells in table.values() for cell in cells.values())


def with_oracle(outcomes: Sequence[Outcome]) -> list[Outcome]:
    """``outcomes`` and the oracle's: a question is right when any single worker got it right, and unscored
    when any could not answer (right or wrong alike, so where errors fall cannot lift the figure)."""
    singles: dict[tuple[str, int], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        if o.method.startswith("single:"):
            singles[(o.task_id, o.repeat)].append(o)
    derived = []
    for (task_id, repeat), group in singles.items():
        scored = [o.correct for o in group if o.correct is not None]
        errors = [o.error for o in group if o.error]
        scores = [o.score for o in group if o.score is not None]
        derived.append(Outcome(
            method="oracle", task_id=task_id, domain=group[0].domain, repeat=repeat,
            # unscored whenever a worker could not answer, right or wrong: dropping only the all-wrong ones
            # would lift the oracle by where the errors fell
            correct=None if errors else any(scored),
            worker_calls=sum(o.worker_calls for o in group),
            worker_prompt_tokens=sum(o.worker_prompt_tokens for o in group),
            worker_completion_tokens=sum(o.worker_completion_tokens for o in group),
            conductor_tokens=0, usd=sum(o.usd for o in group), latency_s=max(o.latency_s for o in group),
            steps=sum(o.steps for o in group), rounds=1, workers=tuple(w for o in group for w in o.workers),
            access=tuple(a for o in group for a in o.access), error=errors[0] if errors else None,
            judge_calls=sum(o.judge_calls for o in group), judge_tokens=sum(o.judge_tokens for o in group),
            judge_usd=sum(o.judge_usd for o in group), score=max(scores) if scores else None))
    return list(outcomes) + derived


def summarise(outcomes: Iterable[Outcome]) -> dict[str, dict[str, Cell]]:
    """{method: {domain: Cell}} plus each method's ``average`` over its domains."""
    grouped: dict[str, dict[str, list[Outcome]]] = defaultdict(lambda: defaultdict(list))
    for o in outcomes:
        grouped[o.method][o.domain].append(o)
    table: dict[str, dict[str, Cell]] = {}
    for method, by_domain in grouped.items():
        cells = {domain: _cell(rows) for domain, rows in sorted(by_domain.items())}
        cells[AVERAGE] = _average(list(cells.values()))
        table[method] = cells
    return table


def _cell(rows: list[Outcome]) -> Cell:
    per_question: dict[str, list[bool]] = defaultdict(list)
    for o in rows:
        if o.correct is not None:
            per_question[o.task_id].append(o.correct)
    means = [sum(v) / len(v) for v in per_question.values()]
    scores = [o.score for o in rows if o.score is not None]
    accuracy = statistics.fmean(means) if means else math.nan
    se = statistics.stdev(means) / math.sqrt(len(means)) if len(means) > 1 else math.nan
    return Cell(accuracy=accuracy, se=se, n=len(means),
                worker_calls=statistics.fmean(o.worker_calls for o in rows),
                worker_tokens=statistics.fmean(o.worker_tokens for o in rows),
                conductor_tokens=statistics.fmean(o.conductor_tokens for o in rows),
                usd=statistics.fmean(o.usd for o in rows), latency_s=statistics.fmean(o.latency_s for o in rows),
                steps=statistics.fmean(o.steps for o in rows), infra_errors=sum(o.correct is None for o in rows),
                judge_calls=statistics.fmean(o.judge_calls for o in rows),
                judge_tokens=statistics.fmean(o.judge_tokens for o in rows),
                judge_usd=statistics.fmean(o.judge_usd for o in rows),
                mean_score=statistics.fmean(scores) if scores else None)


def _average(cells: list[Cell]) -> Cell:
    """Unweighted over domains; the s.e. combines the domains' as independent: sqrt(sum se^2) / k."""
    k = len(cells)
    scores = [c.mean_score for c in cells if c.mean_score is not None]
    return Cell(accuracy=sum(c.accuracy for c in cells) / k, se=math.sqrt(sum(c.se ** 2 for c in cells)) / k,
                n=sum(c.n for c in cells), worker_calls=sum(c.worker_calls for c in cells) / k,
                worker_tokens=sum(c.worker_tokens for c in cells) / k,
                conductor_tokens=sum(c.conductor_tokens for c in cells) / k, usd=sum(c.usd for c in cells) / k,
                latency_s=sum(c.latency_s for c in cells) / k, steps=sum(c.steps for c in cells) / k,
                infra_errors=sum(c.infra_errors for c in cells), judge_calls=sum(c.judge_calls for c in cells) / k,
                judge_tokens=sum(c.judge_tokens for c in cells) / k, judge_usd=sum(c.judge_usd for c in cells) / k,
                mean_score=statistics.fmean(scores) if scores else None)


def best_of(table: dict[str, dict[str, Cell]], prefix: str, domain: str) -> Optional[tuple[str, Cell]]:
    """The method named ``prefix*`` with the highest accuracy in ``domain``."""
    found = [(name, cells[domain]) for name, cells in table.items()
             if name.startswith(prefix) and domain in cells and not math.isnan(cells[domain].accuracy)]
    return max(found, key=lambda item: item[1].accuracy) if found else None  # a cell with nothing scored is not best


def as_json(table: dict[str, dict[str, Cell]], meta: dict[str, Any]) -> dict[str, Any]:
    """``{"methods": {NAME: {DOMAIN: {accuracy, se, n, worker_calls, worker_tokens, conductor_tokens, usd,
    ...}}}, "meta": {...}}``; NaN (one question) is written as null; ``mean_score`` only where a cell has one."""
    def clean(value: Any) -> Any:
        return None if isinstance(value, float) and math.isnan(value) else value

    return {"methods": {name: {domain: {k: clean(v) for k, v in cell.as_dict().items()
                                        if k != "mean_score" or v is not None}
                               for domain, cell in cells.items()} for name, cells in table.items()},
            "meta": meta}
