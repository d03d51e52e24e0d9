"""Where the response cache keeps its answers: Parquet shards on local disk or any fsspec URL (``s3://``),
written the replay store's way (conductor/replay_store.py: one atomic file per write).

Layout: ``{root}/provider={id}/{ms}-{writer}-{seq}.parquet``. Each writer (one pool: a cluster's pool actor,
a driver's in-process pool) appends its new answers as shards of its own and never rewrites one, so writers
on many nodes share a cache without locks. A reader loads one provider's shards in name order, which is
time order to the millisecond; where two writers stored the same key, the earlier answer wins, in every reader
alike (two shards of the same millisecond go by writer id: an arbitrary order, but every reader's). A shard
that cannot be read (cut short, not Parquet) and a row with a field missing are skipped with a warning: their
answers are misses, not a run that cannot start.
"""

from __future__ import annotations

import io
import logging
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Optional

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from conductor.replay_store import put_atomic

SCHEMA = pa.schema([
    ("digest", pa.string()), ("occurrence", pa.int64()), ("provider", pa.string()), ("model", pa.string()),
    ("worker_id", pa.string()), ("text", pa.large_string()), ("prompt_tokens", pa.int64()),
    ("completion_tokens", pa.int64()), ("reasoning_tokens", pa.int64()), ("cost_usd", pa.float64()),
    ("finish_reason", pa.string()), ("created", pa.float64()),
])
Key = tuple[str, int]  # (request digest, occurrence)
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredAnswer:
    text: str
    prompt_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    cost_usd: float
    finish_reason: str


ANSWER_FIELDS = tuple(StoredAnswer.__dataclass_fields__)


@dataclass(frozen=True)
class NewEntry:
    key: Key
    provider: str
    model: str
    worker_id: str
    answer: StoredAnswer


class ResponseStore:
    def __init__(self, root: str, storage_options: Optional[dict[str, Any]] = None):
        self.fs, path = fsspec.core.url_to_fs(root, **(storage_options or {}))
        self.root = path.rstrip("/")
        self.writer = uuid.uuid4().hex[:12]
        self.shards_written = 0
        self.rows_skipped = 0

    def load(self, provider: str) -> dict[Key, StoredAnswer]:
        """Every answer stored for ``provider``, the earliest where a key was stored twice."""
        self.fs.invalidate_cache()
        answers: dict[Key, StoredAnswer] = {}
        for path in sorted(self.fs.glob(f"{self._directory(provider)}/*.parquet")):
            try:
                with self.fs.open(path, "rb") as handle:
                    rows = pq.read_table(handle, schema=SCHEMA).to_pylist()
            except (OSError, ValueError, pa.ArrowException) as exc:  # a cut or foreign file: its answers are misses
                log.warning("response cache: shard %s skipped, unreadable (%s)", path, type(exc).__name__)
                continue
            for row in rows:
                if any(row[name] is None for name in ANSWER_FIELDS + ("digest", "occurrence")):
                    self.rows_skipped += 1  # written by hand or by another tool: not an answer this store made
                    continue
                answers.setdefault((row["digest"], row["occurrence"]),
                                   StoredAnswer(*(row[name] for name in ANSWER_FIELDS)))
        if self.rows_skipped:
            log.warning("response cache: %d stored rows with missing fields skipped", self.rows_skipped)
        return answers

    def append(self, provider: str, entries: Iterable[NewEntry]) -> Optional[str]:
        """One new shard of ``entries`` (None when there are none); returns its path."""
        rows = [{"digest": e.key[0], "occurrence": e.key[1], "provider": e.provider, "model": e.model,
                 "worker_id": e.worker_id, **vars(e.answer), "created": time.time()} for e in entries]
        if not rows:
            return None
        sink = io.BytesIO()
        pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMA), sink, compression="zstd")
        self.shards_written += 1
        name = f"{int(time.time() * 1000):013d}-{self.writer}-{self.shards_written:06d}.parquet"
        path = f"{self._directory(provider)}/{name}"
        put_atomic(self.fs, path, sink.getvalue())
        return path

    def _directory(self, provider: str) -> str:
        return f"{self.root}/provider={provider}"
