"""Replay-store benchmark (local disk).

    .venv/bin/python bench/replay_store.py          # prints a table, updates BENCHMARKS.md

Write: ReplayStore.write (records -> Arrow -> Parquet -> atomic rename, exactly-once check) against the
raw baseline of the same batches, ``pq.write_table(pa.Table.from_pylist(rows, SCHEMA), path)``, in the
same run; ratio = store throughput / raw throughput (goal >= 0.8). Also shown: write_table of prebuilt
Arrow tables, i.e. the Parquet encode alone, to show what the Python-to-Arrow conversion costs. Read: latency of
reading one policy
version's rows (on-policy read) from a store holding many versions.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.pool_rate import write_section  # noqa: E402
from conductor.replay_store import ReplayStore  # noqa: E402
from conductor.rollout_record import SCHEMA, to_rows  # noqa: E402
from tests.support.rollouts import make_records  # noqa: E402


def raw_write(root: Path, batches) -> float:
    started = time.perf_counter()
    for index, batch in enumerate(batches):
        table = pa.Table.from_pylist(to_rows(batch), schema=SCHEMA)
        pq.write_table(table, root / f"raw-{index}.parquet", compression="zstd")
    return time.perf_counter() - started


def encode_only(root: Path, tables) -> float:
    started = time.perf_counter()
    for index, table in enumerate(tables):
        pq.write_table(table, root / f"pre-{index}.parquet", compression="zstd")
    return time.perf_counter() - started


def store_write(root: Path, batches) -> float:
    store = ReplayStore(str(root))
    started = time.perf_counter()
    for batch in batches:
        store.write(batch)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", type=int, default=20)
    parser.add_argument("--batch", type=int, default=256, help="records per batch (one batch per version)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    batches = [make_records(args.batch, version=v) for v in range(args.versions)]
    rows = args.versions * args.batch
    prebuilt = [pa.Table.from_pylist(to_rows(b), schema=SCHEMA) for b in batches]
    raw_times, store_times, read_times, encode_times = [], [], [], []
    for _ in range(args.repeats):
        scratch = Path(tempfile.mkdtemp(prefix="bench-replay-"))
        (scratch / "raw").mkdir()
        raw_times.append(raw_write(scratch / "raw", batches))
        encode_times.append(encode_only(scratch / "raw", prebuilt))
        store_times.append(store_write(scratch / "store", batches))
        store = ReplayStore(str(scratch / "store"))
        for version in range(args.versions):
            started = time.perf_counter()
            table, _ = store.read(version, version)
            read_times.append(time.perf_counter() - started)
            assert table.num_rows == args.batch
        shutil.rmtree(scratch)
    raw, ours, encode = (statistics.median(t) for t in (raw_times, store_times, encode_times))
    ratio = raw / ours
    read_ms = 1000 * statistics.median(read_times)
    table = ("| measure | value |\n|---|---|\n"
             f"| rows written ({args.versions} versions x {args.batch}) | {rows} |\n"
             f"| raw pq.write_table rows/s | {rows / raw:,.0f} |\n"
             f"| ReplayStore.write rows/s | {rows / ours:,.0f} |\n"
             f"| store / raw throughput | {ratio:.3f} (goal >= 0.8) |\n"
             f"| write_table of prebuilt Arrow tables (encode only) rows/s | {rows / encode:,.0f} |\n"
             f"| read one version ({args.batch} rows, {args.versions} versions stored), median ms | {read_ms:.1f} |")
    print(table)
    if not args.no_write:
        write_section("replay_store", f"`bench/replay_store.py` (local disk, zstd, records with 600 prompt and 200 "
                      f"completion tokens, median of {args.repeats}):\n\n{table}\n")
    return 0 if ratio >= 0.8 else 1


if __name__ == "__main__":
    sys.exit(main())
