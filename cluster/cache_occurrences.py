"""The response cache's count of each identical request (conductor/response_cache.py), kept beside a run's
checkpoints, so that a resumed run's n-th identical request is the n-th of the whole run, as in an unbroken
run, and not the first again: counted from zero, it would be served answers the run already got, and a
group's samples would repeat earlier ones.

Written at every checkpoint (a provider whose pool actor does not answer keeps the counts it had, and no count
goes down: a pool actor that Ray restarted counts on from the segment's start, not from where it was), the loop's
last once the requests admitted for later steps have come back; read when the run resumes. A resumed run trains
those requests' groups (cluster/pending_groups.py), so their calls are counted, and one whose rollout is made
again gets new answers rather than old ones. A segment killed between checkpoints, or whose wait for those
requests ran out, leaves counts behind the calls that its pending groups made after the counts were saved: a
resumed run's identical request may be served one of their answers.
"""

from __future__ import annotations

import json
from typing import Any

from conductor.run_output import RunOutput

FILE = "cache_occurrences.json"


def load(out: RunOutput) -> dict[str, dict[str, int]]:
    """Per provider, each request digest's calls so far (nothing for a run that kept none)."""
    if not out.exists(FILE):
        return {}
    return {provider: {digest: int(count) for digest, count in counts.items()}
            for provider, counts in json.loads(out.read_text(FILE)).items()}


def save(out: RunOutput, pool: Any) -> None:
    """``pool``'s counts (a RayPool's ``occurrences()``) merged with those kept before, each digest's the larger:
    a pool actor restarted since counts from the segment's start again, and its lower counts must not replace
    what the run had already called; nothing with the cache off."""
    if not pool.caching:
        return
    counts = load(out)
    for provider, now in pool.occurrences().items():
        kept = counts.setdefault(provider, {})
        for digest, count in now.items():
            kept[digest] = max(kept.get(digest, 0), count)
    out.write_text(FILE, text=json.dumps(counts, separators=(",", ":")))
