import dataclasses
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import s3fs

from conductor.replay_store import Cursor, ReplayStore
from conductor.rollout_record import RolloutRecord, from_table
from tests.support.rollouts import make_records

REPO = Path(__file__).resolve().parents[1]


def test_round_trip_and_exactly_once(tmp_path):
    store = ReplayStore(str(tmp_path / "store"))
    records = make_records(40, version=0)
    assert len(store.write(records)) == 1
    assert store.write(records) == []  # the same batch again (a retry) writes nothing
    table, _ = store.read()
    assert from_table(table) == records


def test_recursive_turns_round_trip_and_a_store_written_before_them_reads(tmp_path):
    import pyarrow.parquet as pq

    from conductor.rollout_record import to_table

    store = ReplayStore(str(tmp_path / "store"))
    turn = {"prompt_token_ids": [1, 2], "completion_token_ids": [3, 4, 5], "completion_logprobs": [-0.5, -1.0, -0.25],
            "policy_version": 0}
    records = [dataclasses.replace(r, recursion_rounds=1, recursive_turns=[turn]) for r in make_records(3, version=0)]
    store.write(records)
    table, _ = store.read()
    assert from_table(table) == records
    old = tmp_path / "old.parquet"
    pq.write_table(to_table(make_records(2, version=0)).drop_columns(["recursive_turns"]), old)
    assert [r.recursive_turns for r in from_table(pq.read_table(old))] == [[], []]
    with pytest.raises(ValueError, match="recursive turn"):
        dataclasses.replace(records[0], recursive_turns=[dict(turn, completion_logprobs=[-0.5])])


def test_a_request_issued_again_at_a_later_version_is_stored_and_read_once(tmp_path):
    """A rollout actor died after writing; its request, issued again, was sampled at a later version with
    the same rollout ids: the store keeps the first copy, and a reader that consumed it skips any other."""
    store = ReplayStore(str(tmp_path / "store"))
    first = make_records(4, version=3, seed=1)
    again = [dataclasses.replace(r, policy_version=4, completion_text="resampled") for r in first]
    assert len(store.write(first)) == 1
    assert store.write(again) == []
    table, cursor = store.read()
    assert table.num_rows == 4 and set(table.column("policy_version").to_pylist()) == {3}
    (tmp_path / "store" / "policy_version=4").mkdir()  # a zombie writer that raced past the check
    duplicate = next((tmp_path / "store" / "policy_version=3").glob("batch-*.parquet"))
    (tmp_path / "store" / "policy_version=4" / duplicate.name).write_bytes(duplicate.read_bytes())
    table, _ = store.read(cursor=cursor)
    assert table.num_rows == 0


def test_local_and_s3_read_back_equal(tmp_path, s3_server):
    records = make_records(30, version=2) + make_records(20, version=3)
    s3 = s3fs.S3FileSystem(**s3_server.storage_options)
    s3.mkdir("replay")
    stores = [ReplayStore(str(tmp_path / "local")),
              ReplayStore("s3://replay/run-1", storage_options=s3_server.storage_options)]
    tables = []
    for store in stores:
        store.write(records)
        assert store.write(records) == []
        assert store.versions() == [2, 3]
        tables.append(store.read(2, 3)[0])
    assert tables[0].equals(tables[1]) and from_table(tables[1]) == records
    assert not any("_tmp" in p for p in s3.find("replay"))


def test_listing_an_s3_store_takes_one_request_however_many_versions_it_holds(s3_server):
    """A reader polls the store every second and every write checks it: on S3 each is one LIST (a page per
    thousand files), not one for every policy_version folder. Counted on the real server's requests."""
    store = ReplayStore("s3://replay/run-listing", storage_options=s3_server.storage_options)
    for version in range(12):
        store.write(make_records(2, version=version, seed=version))
    requests: list[str] = []
    original = store.fs._call_s3

    async def counted(method, *args, **kwargs):
        requests.append(method)
        return await original(method, *args, **kwargs)

    store.fs._call_s3 = counted
    assert [version for version, _ in store.files()] == list(range(12))
    assert store.write(make_records(2, version=12, seed=99)) != [] and store.write(make_records(2, 0)) == []
    table, _ = store.read(min_version=10)
    assert table.num_rows == 6
    assert requests.count("list_objects_v2") == 4  # files(), two writes' checks, read()


def test_version_window_and_resumable_cursor(tmp_path):
    store = ReplayStore(str(tmp_path / "store"))
    for version in range(4):
        store.write(make_records(8, version=version))
    window, cursor = store.read(min_version=2, max_version=3)
    assert sorted(set(window.column("policy_version").to_pylist())) == [2, 3] and window.num_rows == 16
    resumed = Cursor.from_json(cursor.to_json())
    assert store.read(2, 3, resumed)[0].num_rows == 0  # nothing new
    store.write(make_records(8, version=3, seed=9))
    fresh, _ = store.read(2, 3, resumed)
    assert fresh.num_rows == 8 and set(fresh.column("rollout_id").to_pylist()).isdisjoint(
        window.column("rollout_id").to_pylist())


def test_queryable_as_a_hive_partitioned_dataset(tmp_path):
    store = ReplayStore(str(tmp_path / "store"))
    for version in range(3):
        store.write(make_records(16, version=version))
    (tmp_path / "store" / "policy_version=1" / "_tmp-inflight").write_bytes(b"partial")
    table = store.dataset().to_table()
    counts = table.group_by("policy_version").aggregate([("rollout_id", "count")]).sort_by("policy_version")
    assert table.num_rows == 48 and counts.column("rollout_id_count").to_pylist() == [16, 16, 16]
    infra_per_version = sum(1 for r in make_records(16, 0) if r.infra_error)
    assert table.column("reward").null_count == 3 * infra_per_version > 0


def test_record_contract_is_checked():
    good = make_records(1, version=0)[0]
    with pytest.raises(ValueError, match="logprobs"):
        RolloutRecord(**{**good.__dict__, "completion_logprobs": [0.0]})
    with pytest.raises(ValueError, match="infrastructure errors carry no reward"):
        RolloutRecord(**{**good.__dict__, "infra_error": "boom", "reward": 0.5})


WRITER = """
import sys
from conductor.replay_store import ReplayStore
from tests.support.rollouts import make_records
store = ReplayStore(sys.argv[1])
for version in range(int(sys.argv[2])):
    store.write(make_records(400, version=version, prompt_tokens=2000, completion_tokens=400))
    print("wrote", version, flush=True)
"""


def test_a_writer_killed_mid_batch_leaves_no_partial_file_and_its_retry_no_duplicates(tmp_path):
    root = str(tmp_path / "store")
    batches = 12
    env = dict(os.environ, PYTHONPATH=str(REPO))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, root, str(batches)], env=env,
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().startswith("wrote")  # at least one batch done, then kill mid-stream
    time.sleep(0.15)
    writer.send_signal(signal.SIGKILL)
    writer.wait()
    store = ReplayStore(root)
    visible = store.files()
    assert 1 <= len(visible) < batches
    for _, relative in visible:  # every visible file is complete
        table, _ = ReplayStore(root).read(cursor=Cursor({r for _, r in visible} - {relative}))
        assert table.num_rows == 400
    subprocess.run([sys.executable, "-c", WRITER, root, str(batches)], env=env, check=True, capture_output=True)
    table, _ = store.read()
    ids = table.column("rollout_id").to_pylist()
    assert len(store.files()) == batches and len(ids) == len(set(ids)) == 400 * batches
