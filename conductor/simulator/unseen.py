"""Three task types the ``paper-7`` Conductors never train on (the paper's Table 2 protocol, issue 36).

- ``aime``: AIME 2024 (30 problems, ../shared/data/aime24.jsonl), standing in for AIME25;
- ``physchem``: the MMLU-STEM physics and chemistry subjects (791 rows, 780 after exact duplicates of question
  and options are removed), standing in for GPQA-Diamond;
- ``mbpp``: MBPP sanitized (427 problems with assert tests, CC BY 4.0, Google Research; the items its entry
  excludes are left out, ``left_out`` says why), standing in for BigCodeBench, verified in the sandbox like
  HumanEval (conductor/verifiers/code_tests.py).

All three are ordinary ``data.datasets`` entries of conductor/simulator/presets_yaml/paper-7.yaml (its
``unseen`` set; the physics and chemistry subjects are one YAML anchor, excluded from its MMLU training rows).
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
from typing import Any

from conductor.evaluation.paper_reference import TABLE2

NEAREST_COLUMN = {"aime": "math500", "physchem": "mmlu", "mbpp": "code"}
# physchem's error correlation (0.75, MMLU's: the same item source and shared distractors) is in
# conductor/simulator/presets_yaml/paper-7.yaml; AIME and MBPP keep the default 0.5, as math and code do.


def unseen_accuracy(seen: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """{worker: {type: accuracy}} from {worker: {Table 7 column: accuracy}} (fractions), by the rule above."""
    best = {column: max(columns[column] for columns in seen.values()) for column in NEAREST_COLUMN.values()}
    return {worker: {kind: TABLE2["best_single"][kind] / 100 * columns[column] / best[column]
                     for kind, column in NEAREST_COLUMN.items()}
            for worker, columns in seen.items()}


def left_out(preset: str = "paper-7") -> dict[str, dict[Any, str]]:
    """{format (or domain): {value: why}} for the rows the preset's unseen entries exclude with a reason:
    items whose canonical answer cannot score deterministically, left out rather than counted unsolvable."""
    from conductor.simulator.preset_file import read_preset_file

    reasons: dict[str, dict[Any, str]] = {}
    source = read_preset_file(preset).unseen
    for entry in source.datasets if source else ():
        for values in (entry.get("exclude") or {}).values():
            if isinstance(values, dict):
                reasons.setdefault(str(entry.get("format") or entry.get("domain")), {}).update(values)
    return reasons
