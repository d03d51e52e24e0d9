"""Code verdicts remembered by what decides them: the same code, against the same tests, under the same limits
is run once per process.

A check costs two sandboxed interpreters (code_harness.py), and the same code comes back often: a GRPO
group's samples that agree, the workers of a baseline, a re-run served from the response cache, the
simulator's few answers per question. Only a settled verdict is kept: a pass, or a failure the program
caused. A timeout or an output over the cap depends on how loaded the host was, and an infrastructure
error on the host, so those are run again. A program that draws random numbers keeps its first verdict.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from conductor.verifiers.code_harness import OVER_OUTPUT_CAP, TIMED_OUT
from conductor.verifiers.verdict import Verdict


def settled(verdict: Verdict) -> bool:
    """A pass, or a failure the program caused (a stdin test's detail names its test first)."""
    load_decided = verdict.detail.endswith((TIMED_OUT, OVER_OUTPUT_CAP))
    return verdict.correct or (verdict.infra_error is None and not load_decided)


def key_of(*parts: Any) -> str:
    """A digest of ``parts`` (strings, numbers, and JSON-able containers of them)."""
    text = json.dumps(parts, sort_keys=True, default=repr, ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class VerdictMemo:
    """At most ``size`` verdicts, the least recently used dropped first; safe across threads."""

    def __init__(self, size: int = 4096):
        self.size = size
        self.verdicts: OrderedDict[str, Verdict] = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get_or_run(self, key: str, run: Callable[[], Verdict]) -> Verdict:
        with self.lock:
            if key in self.verdicts:
                self.verdicts.move_to_end(key)
                self.hits += 1
                return self.verdicts[key]
            self.misses += 1
        verdict = run()
        if settled(verdict):
            with self.lock:
                self.verdicts[key] = verdict
                while len(self.verdicts) > self.size:
                    self.verdicts.popitem(last=False)
        return verdict
