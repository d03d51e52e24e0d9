"""Outcomes of earlier evaluations, read back so a report can hold methods that were not run again.

The baselines on `paper-7` take ~110k worker calls; a new Conductor checkpoint should not pay them again.
``evaluate.reuse`` names earlier ``outcomes.parquet`` files (local or URL); each method in them must cover
every (question, repeat) of this evaluation, or the report would compare methods on different questions.
Rows for other questions or repeats are dropped; the derived rows (``oracle``, ``domain_table``) are recomputed,
not read: the oracle whenever a reused file held it, so a chain of evaluations keeps it to the last report.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, NamedTuple

import fsspec
import pyarrow.parquet as pq

from conductor.evaluation.outcome import Outcome
from conductor.evaluation.outcome_provenance import Keys, keys_in
from conductor.evaluation.registry import is_derived


class Reused(NamedTuple):
    outcomes: list[Outcome]
    keys: dict[str, Keys]  # each reused method's keys where its file kept them (outcome_provenance.py)
    derived: set[str]      # the derived methods the files held: recomputed, so a chain of reports keeps them


def earlier_outcomes(paths: Sequence[str], task_ids: Sequence[str], repeats: int,
                     storage_options: dict[str, Any] | None = None) -> Reused:
    """The reused rows, their methods' keys and the derived methods the files held."""
    wanted = {(task_id, repeat) for task_id in task_ids for repeat in range(repeats)}
    found: dict[str, list[Outcome]] = {}
    keys: dict[str, Keys] = {}
    derived: set[str] = set()
    for path in paths:
        with fsspec.open(path, "rb", **(storage_options or {})) as handle:
            table = pq.read_table(handle)
        rows, file_keys = table.to_pylist(), keys_in(table.schema.metadata)
        by_method: dict[str, list[Outcome]] = defaultdict(list)
        for row in rows:
            if is_derived(row["method"]):
                derived.add(row["method"])
            elif (row["task_id"], row["repeat"]) in wanted:
                by_method[row["method"]].append(Outcome.from_row(row))
        for method, outcomes in by_method.items():
            if len(outcomes) != len({(o.task_id, o.repeat) for o in outcomes}):
                raise ValueError(f"evaluate.reuse: {path} has method {method!r} twice on some question-repeat; "
                                 "an outcomes file holds each once")
            missing = wanted - {(o.task_id, o.repeat) for o in outcomes}
            if missing:
                raise ValueError(f"evaluate.reuse: {path} has method {method!r} on {len(wanted) - len(missing)} of "
                                 f"this evaluation's {len(wanted)} question-repeats; evaluate it on the same "
                                 "questions (split, seed, questions_per_domain, repeats)")
            found[method] = outcomes  # a later file wins, with its keys (or none)
            keys.pop(method, None)
            if method in file_keys:
                keys[method] = file_keys[method]
    return Reused([o for outcomes in found.values() for o in outcomes], keys, derived)
