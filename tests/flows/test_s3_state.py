"""The S3 flow on the lake: bounded task parameters, the incremental guarantees
(skip, change, delete, re-add, full refresh), sharded listing, stray files,
maintenance, and migration of an old data folder, with real Prefect runs
against a real S3-compatible server."""

from __future__ import annotations

import os
import pickle
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import cloudpickle
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect.task_runners import ThreadPoolTaskRunner
from prefect.tasks import Task

from flows.s3_ingest import s3_ingest
from ingest import storage
from ingest.storage import lake
from ingest.storage.maintenance import RECORD
from tests.helpers import body_for, files_under, put_many, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def ingest(bucket: str, endpoint: str, data_dir: Path, **kw: Any) -> Any:
    return s3_ingest(bucket=bucket, endpoint_url=endpoint, data_dir=str(data_dir), **kw)


def test_no_task_parameter_grows_with_the_bucket(
    s3, s3_server, bucket, data_dir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every task's parameters stay the size of one batch, on a first run and a rerun,
    whatever the bucket holds (the old flow passed the whole manifest to every batch)."""
    objects = {f"m/{i // 100:02d}/{i:05d}.txt": body_for(f"m{i}", 64) for i in range(1200)}
    put_many(s3, bucket, objects)
    monkeypatch.setenv("INGEST_S3_BATCH_SIZE", "40")
    sizes: dict[str, list[int]] = defaultdict(list)
    # Every submission goes through a task runner (Task.submit and the batches' own pool
    # alike); a direct call does not.
    real_submit, real_call = ThreadPoolTaskRunner.submit, Task.__call__

    def measure(task: Task[Any, Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        sizes[task.name].append(len(cloudpickle.dumps((args, kwargs))))

    def submit(
        self: ThreadPoolTaskRunner, task: Task[Any, Any], parameters: dict[str, Any], *a: Any
    ) -> Any:
        measure(task, (), parameters)
        return real_submit(self, task, parameters, *a)  # type: ignore[arg-type]

    def call(self: Task[Any, Any], *args: Any, **kwargs: Any) -> Any:
        measure(self, args, kwargs)
        return real_call(self, *args, **kwargs)

    monkeypatch.setattr(ThreadPoolTaskRunner, "submit", submit)
    monkeypatch.setattr(Task, "__call__", call)
    first = ingest(bucket, s3_server.url, data_dir, extract=False)
    second = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert first.counts == {"downloaded": 1200} and second.counts == {"skipped": 1200}
    assert len(sizes["download-batch"]) == 30  # 1200 / 40, all on the first run
    manifest = pickle.dumps({k: ("0" * 32, len(v), f"/data/{k}") for k, v in objects.items()})
    largest = max(max(v) for v in sizes.values())
    # A batch of 40 objects plus the settings (~7 KB), never the bucket's 1,200 keys
    # (~55 KB, what every batch was once given).
    assert largest < len(manifest) / 4, dict(sizes)


def test_deleted_then_readded_and_full_refresh(s3, s3_server, bucket, data_dir) -> None:
    objects = {f"r/{i:03d}.txt": body_for(f"r{i}") for i in range(40)}
    put_many(s3, bucket, objects)
    ingest(bucket, s3_server.url, data_dir, extract=False)
    s3.delete_object(Bucket=bucket, Key="r/007.txt")
    gone = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert gone.counts == {"skipped": 39, "deleted": 1}
    again = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert again.counts == {"skipped": 39}  # a deleted key is marked once

    s3.put_object(Bucket=bucket, Key="r/007.txt", Body=b"back again")
    back = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert back.counts == {"skipped": 39, "downloaded": 1}
    assert (data_dir / "objects" / bucket / "r" / "007.txt").read_bytes() == b"back again"
    log = rows(
        data_dir,
        "SELECT status FROM s3_object_log WHERE key = 'r/007.txt' ORDER BY ingested_at",
    )
    assert [r["status"] for r in log] == ["downloaded", "deleted", "downloaded"]

    s3_server.reset_stats()
    full = ingest(bucket, s3_server.url, data_dir, extract=False, full_refresh=True)
    assert full.counts == {"downloaded": 40}
    assert s3_server.stats().get("GET object", 0) == 40
    state = rows(data_dir, "SELECT count(*) n, count(DISTINCT key) d FROM s3_objects")
    assert state == [{"n": 40, "d": 40}]


def test_a_local_copy_removed_or_cut_short_is_fetched_again(
    s3, s3_server, bucket, data_dir
) -> None:
    """An unchanged object whose file is gone, cut short or replaced by a folder is
    fetched again; the others are skipped with no request."""
    objects = {f"k/{i:03d}.txt": body_for(f"k{i}") for i in range(30)}
    put_many(s3, bucket, objects)
    ingest(bucket, s3_server.url, data_dir, extract=False)
    folder = data_dir / "objects" / bucket / "k"
    (folder / "003.txt").unlink()
    (folder / "011.txt").write_bytes(objects["k/011.txt"][:-1])
    (folder / "020.txt").unlink()
    (folder / "020.txt").mkdir()
    (folder / "020.txt" / "x").write_bytes(b"x" * len(objects["k/020.txt"]))
    s3_server.reset_stats()
    again = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert again.counts == {"skipped": 27, "downloaded": 2, "failed": 1}
    assert s3_server.stats().get("GET object", 0) == 3
    assert (folder / "003.txt").read_bytes() == objects["k/003.txt"]
    assert (folder / "011.txt").read_bytes() == objects["k/011.txt"]


def test_sharded_listing_finds_the_same_changes(s3, s3_server, bucket, data_dir) -> None:
    objects = {
        f"s/{group}/{i:03d}.txt": body_for(f"{group}{i}")
        for group in ("a", "b", "c", "d", "e", "f")
        for i in range(30)
    }
    objects["s/top-level.txt"] = b"no folder"
    put_many(s3, bucket, objects)
    first = ingest(bucket, s3_server.url, data_dir, prefix="s/", extract=False, list_shards=4)
    assert first.counts == {"downloaded": len(objects)}
    stages = {s["stage"]: s for s in first.stages}
    assert stages["plan-listing"]["items"] == 4

    for key in ("s/a/000.txt", "s/c/015.txt", "s/f/029.txt", "s/top-level.txt"):
        s3.delete_object(Bucket=bucket, Key=key)
    s3.put_object(Bucket=bucket, Key="s/d/001.txt", Body=b"changed")
    second = ingest(bucket, s3_server.url, data_dir, prefix="s/", extract=False, list_shards=4)
    assert second.counts == {"skipped": len(objects) - 5, "downloaded": 1, "deleted": 4}
    third = ingest(bucket, s3_server.url, data_dir, prefix="s/", extract=False, list_shards=1)
    assert third.counts == {"skipped": len(objects) - 4}
    deleted = rows(data_dir, "SELECT key FROM s3_objects WHERE status = 'deleted' ORDER BY key")
    assert [r["key"] for r in deleted] == [
        "s/a/000.txt",
        "s/c/015.txt",
        "s/f/029.txt",
        "s/top-level.txt",
    ]


def test_stray_and_corrupt_files_in_the_data_folder(s3, s3_server, bucket, data_dir) -> None:
    objects = {f"x/{i}.txt": body_for(f"x{i}") for i in range(20)}
    put_many(s3, bucket, objects)
    ingest(bucket, s3_server.url, data_dir, extract=False)
    table = lake.table_path(data_dir, "s3_objects")
    (table / "part-00000-garbage.parquet").write_bytes(b"PAR1 truncated")
    pq.write_table(
        pa.table({"bucket": [bucket], "key": ["x/phantom.txt"], "status": ["downloaded"]}),
        table / "copied-from-elsewhere.parquet",
    )
    (data_dir / "staging" / "old-run" / "s3_objects").mkdir(parents=True)
    (data_dir / "staging" / "old-run" / "s3_objects" / "b.parquet").write_bytes(b"junk")
    (data_dir / "notes.txt").write_text("someone's file")
    long_ago = time.time() - 3600  # left by a run that died an hour ago
    os.utime(data_dir / "staging" / "old-run", (long_ago, long_ago))
    again = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert again.counts == {"skipped": 20}
    keys = {r["key"] for r in rows(data_dir, "SELECT key FROM s3_objects")}
    assert keys == set(objects)
    assert not (data_dir / "staging" / "old-run").exists()  # the dead run's junk was set aside


def test_old_data_folder_is_migrated_by_the_next_run(s3, s3_server, bucket, data_dir) -> None:
    objects = {f"o/{i}.txt": body_for(f"o{i}") for i in range(10)}
    put_many(s3, bucket, objects)
    ingest(bucket, s3_server.url, data_dir, extract=False)
    # Rebuild the old layout from the lake's rows: tables/<table>/<run>/<part>.parquet.
    state = storage.connect(data_dir).execute("SELECT * FROM s3_objects").fetch_arrow_table()
    old = data_dir / "tables" / "s3_objects" / "run-before"
    old.mkdir(parents=True)
    pq.write_table(state.drop_columns([]), old / "batch-000000.parquet")
    import shutil

    shutil.rmtree(data_dir / "lake")
    after = ingest(bucket, s3_server.url, data_dir, extract=False)
    assert after.counts == {"skipped": 10}  # the migrated state is used at once
    assert (data_dir / "tables.migrated").is_dir() and not (data_dir / "tables").exists()
    assert files_under(data_dir / "objects" / bucket) == objects


def test_inventory_report_as_the_listing_source(s3, s3_server, bucket, data_dir) -> None:
    from datetime import UTC, datetime, timedelta

    from dev.inventory import write_inventory

    objects = {f"inv/{i:03d} file.txt": body_for(f"inv{i}") for i in range(120)}
    put_many(s3, bucket, objects)
    reports = f"{bucket}-inventory"
    s3.create_bucket(Bucket=reports)
    day = datetime(2026, 11, 1, tzinfo=UTC)
    write_inventory(s3, bucket, reports, "inv", "daily", fmt="Parquet", files=3, when=day)
    url = f"s3://{reports}/inv/{bucket}/daily/"
    s3_server.reset_stats()
    first = ingest(
        bucket, s3_server.url, data_dir, extract=False, listing="inventory", inventory=url
    )
    assert first.counts == {"downloaded": 120}
    assert s3_server.stats().get("LIST", 0) <= 2  # finding the newest report, not the bucket
    assert files_under(data_dir / "objects" / bucket) == objects

    s3.delete_object(Bucket=bucket, Key="inv/005 file.txt")
    s3.put_object(Bucket=bucket, Key="inv/006 file.txt", Body=b"changed")
    write_inventory(s3, bucket, reports, "inv", "daily", fmt="CSV", when=day + timedelta(days=1))
    second = ingest(
        bucket, s3_server.url, data_dir, extract=False, listing="inventory", inventory=url
    )
    assert second.counts == {"skipped": 118, "downloaded": 1, "deleted": 1}
    # nothing staged is left behind, and the target's lease was given back (beside them,
    # the record of the lake's upkeep: ingest.storage.maintenance.RECORD)
    left = [p.relative_to(data_dir).as_posix() for p in (data_dir / "staging").rglob("*")]
    assert sorted(left) in ([], ["staging/_leases"], ["staging/_leases", RECORD]), left
