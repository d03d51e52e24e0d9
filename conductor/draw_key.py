"""Where a rollout group's randomness comes from: its Conductor samples' seed, its roster, its cost-dial setting
and which of its samples get a recursive round are all drawn from (the run's seed, the group's draw key),
never from a process's running generator.

A training request's draw key names what was drawn, not when: the question sampler's state before the
request's questions were drawn (cluster/group_collector.py), which a checkpoint keeps. Group i of the request
is ``{key}-q{i}``. So a second run with the same seed samples the same completions however its requests
interleave, whichever rollout actor or engine replica serves them (a restarted one too). An async run also
repeats which groups each step trains on, and their versions, only with ``train.replayable``
(cluster/group_collector.py): then a re-run over the worker-response cache replays every call (paper-7 at k = 1:
100%; without it 93.8%; README, "Re-running without paying again"). The
engine samples a seeded prompt apart from the rest of its batch (vLLM's per-request generator; prompt i of a
call gets ``seed + i * n``, its n samples ``+ j``), so what else is in the batch does not move its draws.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Mapping
from typing import Any

SEED_SPACE = 2**31  # vLLM's seeds are ints; a call's prompts and samples add small offsets to one


def request_key(sampler_state: Mapping[str, Any]) -> str:
    """A training request's draw key: the question sampler's state before its questions were drawn."""
    return json.dumps(sampler_state, sort_keys=True, separators=(",", ":"))


def group_key(key: str, index: int) -> str:
    return f"{key}-q{index}"


def seed_of(run_seed: int, key: str, purpose: str) -> int:
    """A seed for ``purpose`` (e.g. "sample") of what ``key`` names, the same in every process."""
    digest = hashlib.sha256(f"{purpose}:{run_seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (SEED_SPACE - 2**20)  # room below 2**31 for the offsets


def rng_of(run_seed: int, key: str, purpose: str) -> random.Random:
    return random.Random(seed_of(run_seed, key, purpose))
