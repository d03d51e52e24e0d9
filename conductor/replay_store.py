"""The replay store: rollout records as Parquet files, on local disk or any fsspec URL (``s3://``).

Layout: ``{root}/policy_version={v}/batch-{digest}.parquet``, where ``digest`` hashes the batch's
sorted rollout ids. That makes writes exactly-once across retries and restarts: writing the same
batch again finds its file (under any version: a request re-issued after its actor died may be sampled
at a later version, with the same rollout ids) and does nothing. Writes are atomic: locally a hidden ``_tmp-*`` file is
renamed into place; on S3 the object is one PUT, which appears whole or not at all. So a writer killed
mid-batch leaves nothing visible, and its retry writes the file once.

Readers ask for a version window (``min_version``/``max_version``; the training driver reads everything
from its segment's first version and enforces staleness per group) and get the rows of files they have
not consumed yet; the cursor (the set of consumed files) is plain JSON, so a
learner can checkpoint it and resume. A file whose batch digest was consumed under another version is
skipped too, and rows are de-duplicated by ``rollout_id``.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Optional

import fsspec
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq

from conductor.rollout_record import SCHEMA, RolloutRecord, to_table

_FILE = re.compile(r"policy_version=(\d+)/batch-([0-9a-f]+)\.parquet")


@dataclass
class Cursor:
    consumed: set[str] = field(default_factory=set)  # paths relative to the store root

    def to_json(self) -> str:
        return json.dumps(sorted(self.consumed))

    @classmethod
    def from_json(cls, text: str) -> Cursor:
        return cls(set(json.loads(text)))


class ReplayStore:
    def __init__(self, root: str, storage_options: Optional[dict[str, Any]] = None, compression: str = "zstd"):
        self.fs, self.root = fsspec.core.url_to_fs(root, **(storage_options or {}))
        self.root = self.root.rstrip("/")
        self.local = is_local(self.fs)
        self.compression = compression
        self.fs.makedirs(self.root, exist_ok=True)

    def write(self, records: list[RolloutRecord]) -> list[str]:
        """Write records (any mix of policy versions); returns the paths written, skipping batches
        already present."""
        by_version: dict[int, list[RolloutRecord]] = {}
        for record in records:
            by_version.setdefault(record.policy_version, []).append(record)
        written = []
        for version, batch in sorted(by_version.items()):
            ids = sorted(r.rollout_id for r in batch)
            if len(set(ids)) != len(ids):
                raise ValueError(f"duplicate rollout ids within one batch (version {version})")
            digest = hashlib.sha256("\n".join(ids).encode()).hexdigest()[:24]
            path = f"{self.root}/policy_version={version}/batch-{digest}.parquet"
            if any(_digest(relative) == digest for _, relative in self.files()):
                continue
            self._put_atomic(path, self._encode(to_table(batch)))
            written.append(path)
        return written

    def _encode(self, table: pa.Table) -> bytes:
        sink = io.BytesIO()
        pq.write_table(table, sink, compression=self.compression)
        return sink.getvalue()

    def _put_atomic(self, path: str, data: bytes) -> None:
        put_atomic(self.fs, path, data)

    def files(self) -> list[tuple[int, str]]:
        """(policy version, relative path) of every complete batch file, in a stable order. One flat listing
        of the root (on S3 one LIST a thousand files): a glob over ``policy_version=*`` lists each version's
        folder apart, a request per version on every poll and every write of a long run."""
        self.fs.invalidate_cache()
        found = []
        for path in self.fs.find(self.root):
            relative = path[len(self.root) + 1:]
            match = _FILE.fullmatch(relative)
            if match:
                found.append((int(match.group(1)), relative))
        return sorted(found)

    def dataset(self) -> ds.Dataset:
        """The whole store as one pyarrow dataset (for pandas, DuckDB, Polars). Files being written
        (``_tmp-*``) are ignored, as pyarrow skips ``_``-prefixed names."""
        partitioning = ds.partitioning(pa.schema([("policy_version", pa.int64())]), flavor="hive")
        return ds.dataset(self.root, filesystem=self.fs, format="parquet", partitioning=partitioning,
                          schema=SCHEMA)

    def versions(self) -> list[int]:
        return sorted({version for version, _ in self.files()})

    def read(self, min_version: int = 0, max_version: Optional[int] = None, cursor: Optional[Cursor] = None,
             ) -> tuple[pa.Table, Cursor]:
        """Rows of unconsumed files with ``min_version <= policy_version <= max_version``, and the
        advanced cursor."""
        cursor = Cursor(set(cursor.consumed)) if cursor else Cursor()
        consumed_digests = {_digest(path) for path in cursor.consumed}
        tables = []
        for version, relative in self.files():
            if version < min_version or (max_version is not None and version > max_version):
                continue
            if relative in cursor.consumed or _digest(relative) in consumed_digests:
                continue
            consumed_digests.add(_digest(relative))
            with self.fs.open(f"{self.root}/{relative}", "rb") as handle:
                tables.append(pq.read_table(handle, schema=SCHEMA))
            cursor.consumed.add(relative)
        if not tables:
            return SCHEMA.empty_table(), cursor
        table = pa.concat_tables(tables)
        return _drop_duplicate_ids(table), cursor


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def put_atomic(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> None:
    """``data`` at ``path``, whole or not at all (the response cache's shards are written the same way)."""
    directory = path.rsplit("/", 1)[0]
    if not is_local(fs):
        fs.pipe_file(path, data)  # one PUT below 100 MB (s3fs), else multipart: S3 shows neither half-done
        return
    fs.makedirs(directory, exist_ok=True)
    temporary = f"{directory}/_tmp-{uuid.uuid4().hex}"
    with fs.open(temporary, "wb") as handle:
        handle.write(data)
    fs.mv(temporary, path)  # rename within one directory: atomic on POSIX


def _digest(path: str) -> str:
    return path.rsplit("batch-", 1)[-1].removesuffix(".parquet")


def _drop_duplicate_ids(table: pa.Table) -> pa.Table:
    ids = table.column("rollout_id").to_pylist()
    seen, keep = set(), []
    for index, rollout_id in enumerate(ids):
        if rollout_id not in seen:
            seen.add(rollout_id)
            keep.append(index)
    return table if len(keep) == len(ids) else table.take(keep)
