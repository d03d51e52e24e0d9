"""Three task types the ``paper-7`` Conductors never train on (the paper's Table 2 protocol, issue 36).

- ``aime``: AIME 2024 (30 problems, ../shared/data/aime24.jsonl), standing in for AIME25;
- ``physchem``: the MMLU-STEM physics and chemistry subjects (``UNSEEN_SUBJECTS``; 791 rows, 780 after exact
  duplicates of question and options are removed), standing in for GPQA-Diamond;
- ``mbpp``: MBPP sanitized (427 problems with assert tests, CC BY 4.0, Google Research; ``MBPP_EXCLUDED`` left
  out), standing in for BigCodeBench, verified in the sandbox like HumanEval (conductor/verifiers/code_tests.py).

"-like" is about the calibration only: the items are easier and older than the paper's. They live in
``SimPreset.unseen``, apart from ``SimPreset.tasks``: training, splits, the warm-start menu and the tokenizer
corpus read ``tasks`` alone, so nothing trains on them; ``evaluate.split: unseen`` scores them.

**The calibration is an assumption, not the paper's.** The paper's Table 2 gives only each type's best single
worker (46.67 / 35.8 / 75.25); its per-worker rows could not be read here. So each type's best worker is anchored
at that figure, and every other worker keeps its ratio to the best worker in the nearest in-domain Table 7
column (``NEAREST_COLUMN``): ``acc(w, type) = TABLE2_BEST[type] * col(w) / max_v col(v)``. Which worker is best
on a type, and every other worker's figure, follow from Table 7 by that rule (``unseen_accuracy``, the one place
to replace with the paper's rows). A linear shift would give gemma a negative AIME score.

**Astronomy** is filed under physics by MMLU's own taxonomy, and its 152 rows are among paper-7's 600 MMLU
training rows: it stays there, a disclosed near neighbour of ``physchem`` that the routers and the Conductor
trained on alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from conductor.evaluation.paper_reference import TABLE2
from conductor.tasks.formats import preset_tasks
from conductor.tasks.loader import read_rows
from conductor.tasks.task import Task

UNSEEN_SUBJECTS = frozenset({"college_physics", "conceptual_physics", "high_school_physics", "college_chemistry",
                             "high_school_chemistry"})
NEAREST_COLUMN = {"aime": "math500", "physchem": "mmlu", "mbpp": "code"}
# physchem's error correlation (0.75, MMLU's: the same item source and shared distractors) is in
# conductor/simulator/presets_yaml/paper-7.yaml; AIME and MBPP keep the default 0.5, as math and code do.
# Items whose canonical solution cannot score deterministically in the sandbox: left out, not counted unsolvable.
MBPP_EXCLUDED = {123: "its canonical solution takes 4.5-7.5 s of CPU (divisor sums up to 9,999), so a loaded "
                      "machine would time it out against the 10 s limit and score a right answer wrong"}


def unseen_accuracy(seen: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """{worker: {type: accuracy}} from {worker: {Table 7 column: accuracy}} (fractions), by the rule above."""
    best = {column: max(columns[column] for columns in seen.values()) for column in NEAREST_COLUMN.values()}
    return {worker: {kind: TABLE2["best_single"][kind] / 100 * columns[column] / best[column]
                     for kind, column in NEAREST_COLUMN.items()}
            for worker, columns in seen.items()}


def physchem_rows(rows: list[dict]) -> list[dict]:
    """The rows of ``UNSEEN_SUBJECTS``, each (question, options) once."""
    kept, seen = [], set()
    for row in rows:
        key = (row.get("question"), tuple(row.get("choices") or ()))
        if (row.get("type") or row.get("subject")) in UNSEEN_SUBJECTS and key not in seen:
            seen.add(key)
            kept.append(row)
    return kept


def unseen_tasks(data_dir: str, seed: int) -> tuple[Task, ...]:
    root = Path(data_dir)
    mbpp = [row for row in read_rows(str(root / "mbpp_sanitized.json")) if row["task_id"] not in MBPP_EXCLUDED]
    return tuple(preset_tasks(read_rows(str(root / "aime24.jsonl")), "aime", seed)
                 + preset_tasks(physchem_rows(read_rows(str(root / "mmlu_stem.jsonl"))), "mmlu", seed,
                                domain="physchem")
                 + preset_tasks(mbpp, "mbpp", seed))
