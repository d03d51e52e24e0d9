"""A toy open-ended task set, graded by a judge: 30 questions in three domains with short reference answers
(conductor/assets/open_ended_toy.jsonl), for the simulated ``toy-judged`` pool.

    strategy   "A team misses most of its deadlines. What is the first fix?"
    research   "How would you test whether a new fertiliser raises wheat yield?"
    explain    "Why does the Moon show phases?"

It loads as any dataset does, through a field map with ``verifier: judge`` (``OPEN_ENDED_ENTRY``, the
same entry a config writes under ``data.datasets`` with the file's path); the preset's built-in task source
``open-ended`` is this entry, so the simulator and a run that lists the file see the same tasks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

OPEN_ENDED_PATH = Path(__file__).resolve().parents[1] / "assets" / "open_ended_toy.jsonl"
OPEN_ENDED_ENTRY: dict[str, Any] = {
    "fields": {"question": "question", "answer": "reference", "id": "id", "domain": "domain"},
    "id_prefix": "open/", "verifier": "judge"}


def open_ended_entry(path: str | Path = OPEN_ENDED_PATH) -> dict[str, Any]:
    """The ``data.datasets`` entry that reads the set (its own file, or a copy at ``path``)."""
    return {"path": str(path), **OPEN_ENDED_ENTRY}
