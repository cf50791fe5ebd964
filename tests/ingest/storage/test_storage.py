"""The lake: staged rows committed once per run, MERGE by key, idempotent replays,
views over the current version, stray files never read, retention and compaction,
migration of the old Parquet-folder layout."""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest import storage
from ingest.report import freshness, history
from ingest.s3 import changes
from ingest.s3 import scan as listing
from ingest.settings import Settings
from ingest.storage import commit, lake, staging
from ingest.storage.tables import SPECS, STATE_PARTS


def obj_row(key: str, etag: str, status: str = "downloaded", when: datetime | None = None):
    return {
        "bucket": "b",
        "key": key,
        "etag": etag,
        "size": 1,
        "last_modified": when or datetime.now(UTC),
        "local_path": f"/x/{key}",
        "status": status,
        "run_id": "r",
        "ingested_at": when or datetime.now(UTC),
    }


def q(data_dir: Path, sql: str) -> list[tuple]:
    return storage.query(data_dir, sql)[1]


def test_commit_merges_state_and_appends_log_once(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    storage.stage(tmp_path, "run1", "s3_objects", "batch-0", [obj_row("a", "1", when=t0)])
    storage.stage(tmp_path, "run1", "s3_objects", "batch-1", [obj_row("b", "1", when=t0)])
    report = storage.commit_run(tmp_path, "run1")
    assert report.rows == {"s3_objects": 2}
    assert staging.parts(tmp_path, "run1", "s3_objects") == []
    assert q(tmp_path, "SELECT key, etag FROM s3_objects ORDER BY key") == [("a", "1"), ("b", "1")]

    # A newer row replaces; an older one (a late replay) does not.
    t1 = t0 + timedelta(days=1)
    storage.stage(tmp_path, "run2", "s3_objects", "p", [obj_row("a", "2", when=t1)])
    storage.stage(tmp_path, "run2", "s3_objects", "q", [obj_row("b", "0", when=t0 - timedelta(1))])
    storage.commit_run(tmp_path, "run2")
    assert q(tmp_path, "SELECT key, etag FROM s3_objects ORDER BY key") == [("a", "2"), ("b", "1")]
    assert q(tmp_path, "SELECT count(*) FROM s3_object_log") == [(4,)]
    days = q(tmp_path, "SELECT DISTINCT day FROM s3_object_log ORDER BY day")
    assert [d[0].isoformat() for d in days] == ["2025-12-31", "2026-01-01", "2026-01-02"]


def test_a_night_with_nothing_new_writes_no_version(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    lake.merge(tmp_path, "s3_objects", pa.Table.from_pylist([obj_row("a", "1", when=t0)]))
    version = lake.open_table(tmp_path, "s3_objects").version()
    lake.merge(tmp_path, "s3_objects", pa.Table.from_pylist([obj_row("a", "1", when=t0)]))
    assert lake.open_table(tmp_path, "s3_objects").version() == version


def test_interrupted_commit_is_replayed_without_duplicates(tmp_path: Path) -> None:
    storage.stage(tmp_path, "run1", "task_timings", "t1", [timing_row("t1")])
    # First commit went through, but the process died before removing the parts.
    folder = staging.run_dir(tmp_path, "run1")
    real_remove = staging.remove_parts
    staging.remove_parts = lambda data_dir, keys: None  # type: ignore[assignment]
    try:
        with pytest.raises(FileNotFoundError):
            orig_unlink = Path.unlink

            def boom(self: Path, missing_ok: bool = False) -> None:
                if self.name.endswith(".commit"):
                    raise FileNotFoundError("killed")
                orig_unlink(self, missing_ok=missing_ok)

            Path.unlink = boom  # type: ignore[method-assign]
            try:
                storage.commit_run(tmp_path, "run1")
            finally:
                Path.unlink = orig_unlink  # type: ignore[method-assign]
    finally:
        staging.remove_parts = real_remove  # type: ignore[assignment]
    assert (folder / "task_timings.commit").exists()
    storage.commit_run(tmp_path, "run1")  # the replay
    assert q(tmp_path, "SELECT count(*) FROM task_timings") == [(1,)]


def timing_row(task_run_id: str, started: datetime | None = None) -> dict:
    started = started or datetime.now(UTC)
    return {
        "flow_run_id": "f",
        "flow_name": "s3-ingest",
        "task_run_id": task_run_id,
        "task_name": "download-batch",
        "started_at": started,
        "ended_at": started,
        "seconds": 1.0,
        "items": 1,
        "bytes": 1,
        "attempts": 1,
        "state": "completed",
    }


def test_dead_runs_are_recovered_live_ones_left_alone(tmp_path: Path) -> None:
    storage.stage(tmp_path, "dead", "s3_objects", "p", [obj_row("a", "1")])
    storage.stage(tmp_path, "live", "s3_objects", "p", [obj_row("b", "1")])
    old = datetime.now().timestamp() - 3600
    os.utime(staging.run_dir(tmp_path, "dead"), (old, old))
    staging.touch(tmp_path, "live")
    assert storage.recover(tmp_path, stale_after=60) == ["dead"]
    assert q(tmp_path, "SELECT key FROM s3_objects") == [("a",)]
    assert staging.runs(tmp_path) == ["live"]


def test_stray_and_corrupt_files_are_never_read(tmp_path: Path) -> None:
    storage.stage(tmp_path, "run1", "s3_objects", "p", [obj_row("a", "1")])
    storage.commit_run(tmp_path, "run1")
    table_dir = lake.table_path(tmp_path, "s3_objects")
    (table_dir / "stray.parquet").write_bytes(b"PAR1 not a parquet file")
    pq.write_table(pa.Table.from_pylist([obj_row("zz", "9")]), table_dir / "foreign.parquet")
    # A corrupt staged part of a later run is quarantined, the rest committed.
    storage.stage(tmp_path, "run2", "s3_objects", "good", [obj_row("b", "1")])
    bad = staging.run_dir(tmp_path, "run2") / "s3_objects" / "bad.parquet"
    bad.write_bytes(b"garbage")
    storage.commit_run(tmp_path, "run2")
    assert q(tmp_path, "SELECT key FROM s3_objects ORDER BY key") == [("a",), ("b",)]
    assert not bad.exists()
    assert list((tmp_path / staging.STAGING_DIR / "_quarantine").iterdir())


def test_retention_compaction_and_vacuum(tmp_path: Path) -> None:
    today = datetime(2026, 6, 1, tzinfo=UTC)
    for night in range(40):
        when = today - timedelta(days=night)
        storage.stage(tmp_path, f"n{night}", "task_timings", "t", [timing_row(f"t{night}", when)])
        storage.commit_run(tmp_path, f"n{night}")
        for i in range(3):
            storage.stage(tmp_path, f"n{night}", "s3_objects", "p", [obj_row(f"k{night}-{i}", "1")])
            storage.commit_run(tmp_path, f"n{night}")
    before = len(storage.data_files(tmp_path, "s3_objects"))
    report = storage.maintain(
        tmp_path,
        retention_days=30,
        compact_min_files=8,
        vacuum_retention_hours=0,
        today=today.date(),
    )
    assert report.expired_files["task_timings"] == 9  # days 31..39 before the cutoff
    assert q(tmp_path, "SELECT count(*) FROM task_timings") == [(31,)]
    assert q(tmp_path, "SELECT count(*) FROM s3_objects") == [(120,)]
    after = len(storage.data_files(tmp_path, "s3_objects"))
    keys = [f"k{night}-{i}" for night in range(40) for i in range(3)]
    parts = {p.as_py() for p in lake.part_of(pa.array(keys), STATE_PARTS)}
    assert before == 120 and after == len(parts)  # one file per hash part
    table_dir = lake.table_path(tmp_path, "s3_objects")
    on_disk = [p for p in table_dir.rglob("*.parquet") if "_delta_log" not in p.parts]
    assert len(on_disk) == after  # vacuumed
    log_dir = lake.table_path(tmp_path, "s3_objects") / "_delta_log"
    assert list(log_dir.glob("*.checkpoint.parquet"))  # readers replay from a checkpoint


def test_upkeep_is_due_by_commits_and_time_since_the_last(tmp_path: Path) -> None:
    """A table never written is never due; one never maintained is; once maintained it is
    due again after CHECKPOINT_EVERY commits or MAINTAIN_EVERY seconds."""
    from ingest.storage import maintenance

    tables = ["task_timings", "s3_objects"]
    assert maintenance.due(tmp_path, tables) == []
    for i in range(3):
        storage.stage(tmp_path, f"r{i}", "task_timings", "t", [timing_row(f"t{i}")])
        storage.commit_run(tmp_path, f"r{i}")
    assert maintenance.newest_version(tmp_path, "task_timings") == 2
    assert maintenance.due(tmp_path, tables) == ["task_timings"]

    storage.maintain(tmp_path, retention_days=0, compact_min_files=100, vacuum_retention_hours=0)
    now = time.time()
    assert maintenance.due(tmp_path, tables, now=now) == []
    assert maintenance.due(tmp_path, tables, now=now + maintenance.MAINTAIN_EVERY) == [
        "task_timings"
    ]
    for i in range(lake.CHECKPOINT_EVERY - 1):
        storage.stage(tmp_path, f"s{i}", "task_timings", "t", [timing_row(f"s{i}")])
        storage.commit_run(tmp_path, f"s{i}")
    assert maintenance.due(tmp_path, tables, now=now) == []
    storage.stage(tmp_path, "last", "task_timings", "t", [timing_row("last")])
    storage.commit_run(tmp_path, "last")
    assert maintenance.due(tmp_path, tables, now=now) == ["task_timings"]
    (tmp_path / maintenance.RECORD).write_text("{torn")
    assert maintenance.due(tmp_path, tables, now=now) == ["task_timings"]  # due once more


def test_views_in_warehouse_file_and_scan_with_staged_rows(tmp_path: Path) -> None:
    import duckdb

    storage.stage(tmp_path, "r1", "task_timings", "a", [timing_row("a")])
    storage.commit_run(tmp_path, "r1")
    storage.stage(tmp_path, "r1", "task_timings", "b", [timing_row("b")])
    assert storage.refresh_warehouse(tmp_path)
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM task_timings").fetchone() == (1,)
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (0,)
    with duckdb.connect() as con:
        sql = f"SELECT count(*) FROM {storage.scan(tmp_path, 'task_timings', staged_run='r1')}"
        assert con.execute(sql).fetchone() == (2,)


def test_migration_of_the_old_layout(tmp_path: Path) -> None:
    old = tmp_path / "tables" / "s3_objects"
    (old / "run1").mkdir(parents=True)
    (old / "run2").mkdir(parents=True)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    schema = storage.SCHEMAS["s3_objects"]
    pq.write_table(
        pa.Table.from_pylist([obj_row("a", "1", when=t0), obj_row("b", "1", when=t0)], schema),
        old / "run1" / "batch-000000.parquet",
    )
    pq.write_table(
        pa.Table.from_pylist(
            [
                obj_row("a", "2", when=t0 + timedelta(1)),
                obj_row("b", "1", "skipped", when=t0 + timedelta(1)),
            ],
            schema,
        ),
        old / "run2" / "batch-000000.parquet",
    )
    pq.write_table(schema.empty_table(), old / "_schema.parquet")
    storage.prepare(tmp_path)
    assert not (tmp_path / "tables").exists()
    assert (tmp_path / "tables.migrated").is_dir()
    assert q(tmp_path, "SELECT key, etag, status FROM s3_objects ORDER BY key") == [
        ("a", "2", "downloaded"),
        ("b", "1", "skipped"),
    ]
    assert q(tmp_path, "SELECT count(*) FROM s3_object_log") == [(3,)]
    storage.prepare(tmp_path)  # once only
    assert q(tmp_path, "SELECT count(*) FROM s3_object_log") == [(3,)]


def test_a_large_commit_goes_in_slices_and_a_crash_between_them_is_replayed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(commit, "SLICE_ROWS", 5)
    for p in range(5):
        rows = [obj_row(f"k{p}-{i}", "1") for i in range(3)]
        storage.stage(tmp_path, "big", "s3_objects", f"p{p}", rows)
    real = commit._commit_slice
    calls = {"n": 0}

    def dies_on_the_third(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 3:
            raise OSError("killed between two slices")
        return real(*args, **kwargs)

    monkeypatch.setattr(commit, "_commit_slice", dies_on_the_third)
    with pytest.raises(OSError):
        storage.commit_run(tmp_path, "big")
    assert q(tmp_path, "SELECT count(*) FROM s3_objects") == [(6,)]  # two slices of 3 rows
    monkeypatch.setattr(commit, "_commit_slice", real)
    assert storage.commit_run(tmp_path, "big").rows == {"s3_objects": 9}
    assert q(tmp_path, "SELECT count(*), count(DISTINCT key) FROM s3_objects") == [(15, 15)]
    assert q(tmp_path, "SELECT count(*) FROM s3_object_log") == [(15,)]
    # One MERGE per slice (5 slices of one staged part each): the table is small, so all
    # its hash parts go in one MERGE (version 0 is the table's creation: a state table is
    # created empty, then MERGEd into, so that two first runs at once conflict).
    assert lake.open_table(tmp_path, "s3_objects").version() == 5


def test_a_merge_reads_a_bounded_number_of_stored_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hash parts are merged in groups of at most MERGE_TARGET_ROWS stored rows: one
    commit for a small table, several for a large one, the same rows either way."""
    keys = [f"k{i}" for i in range(40)]
    storage.stage(tmp_path, "r1", "s3_objects", "a", [obj_row(k, "1") for k in keys])
    storage.commit_run(tmp_path, "r1")
    dt = lake.open_table(tmp_path, "s3_objects")
    parts = sorted({p.as_py() for p in lake.part_of(pa.array(keys), 16)})
    spec = SPECS["s3_objects"]
    again = lake.conform(spec, pa.Table.from_pylist([obj_row(k, "2") for k in keys]))
    assert lake.part_groups(dt, again, "key") == [parts]  # 40 rows: one group
    monkeypatch.setattr(lake, "MERGE_TARGET_ROWS", 6)
    groups = lake.part_groups(dt, again, "key")
    assert len(groups) > 1 and sorted(p for g in groups for p in g) == parts
    before = dt.version()
    storage.stage(tmp_path, "r2", "s3_objects", "a", [obj_row(k, "2") for k in keys])
    storage.commit_run(tmp_path, "r2")
    assert lake.open_table(tmp_path, "s3_objects").version() == before + len(groups)
    assert q(tmp_path, "SELECT count(*), count(DISTINCT key), min(etag) FROM s3_objects") == [
        (40, 40, "2")
    ]


def test_a_merge_of_new_keys_skips_the_stored_files_outside_their_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A first run commits in listing order: each slice's keys lie past every stored
    one, so its MERGE reads no stored file (pruned by key statistics) and all its hash
    parts go in one commit, however small MERGE_TARGET_ROWS; a slice that reaches back
    into stored keys reads the files it may match and updates them."""
    monkeypatch.setattr(lake, "MERGE_TARGET_ROWS", 10)
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    first = pa.Table.from_pylist([obj_row(f"a/{i:04d}", "1", when=t0) for i in range(200)])
    lake.merge(tmp_path, "s3_objects", first)
    version = lake.open_table(tmp_path, "s3_objects").version()
    later = pa.Table.from_pylist([obj_row(f"b/{i:04d}", "1", when=t0) for i in range(200)])
    metrics = lake.merge(tmp_path, "s3_objects", later)
    assert metrics["num_target_files_scanned"] == 0
    assert lake.open_table(tmp_path, "s3_objects").version() == version + 1
    assert metrics["num_target_rows_inserted"] == 200
    back = pa.Table.from_pylist([obj_row("a/0007", "2", when=t0 + timedelta(1))])
    metrics = lake.merge(tmp_path, "s3_objects", back)
    assert metrics["num_target_files_scanned"] >= 1 and metrics["num_target_rows_updated"] == 1
    assert q(tmp_path, "SELECT count(*), count(DISTINCT key) FROM s3_objects") == [(400, 400)]
    assert q(tmp_path, "SELECT etag FROM s3_objects WHERE key = 'a/0007'") == [("2",)]


def test_temporary_files_of_dead_writers_are_swept_live_ones_kept(tmp_path: Path) -> None:
    """A killed writer leaves temporary files in a table's folder and log (ours, delta-rs's
    commit files, the object store's upload files) and in staging: maintenance and the next
    run's preparation delete the old ones, keep a young one (a writer at work), and every
    row stays readable."""
    storage.stage(tmp_path, "r1", "s3_objects", "p", [obj_row("k", "1")])
    storage.commit_run(tmp_path, "r1")
    table_dir = lake.table_path(tmp_path, "s3_objects")
    part_dir = next(p for p in table_dir.iterdir() if p.name.startswith("part="))
    old = time.time() - 2 * 3600
    dead = [
        part_dir / ".part-00001-dead.parquet.tmp",
        part_dir / "part-00001-dead.zstd.parquet#1",
        table_dir / "_delta_log" / "_commit_0123abcd.json.tmp",
        tmp_path / "staging" / "r2" / "s3_objects" / ".batch-1.abc.tmp",
    ]
    young = part_dir / "part-00002-live.zstd.parquet#1"
    for path in [*dead, young]:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"PAR1 half written")
    for path in dead:
        os.utime(path, (old, old))
    staging.touch(tmp_path, "r2")  # r2 is alive: recovery leaves its folder in place

    storage.prepare(tmp_path, current_run="r3")
    report = storage.maintain(
        tmp_path, retention_days=0, compact_min_files=100, vacuum_retention_hours=168
    )
    assert [p for p in dead if p.exists()] == []
    assert young.exists()
    assert report.swept == {"s3_objects": 3}
    assert q(tmp_path, "SELECT key FROM s3_objects") == [("k",)]


def test_renames_are_synced_before_anything_points_at_them(
    tmp_path: Path, monkeypatch, s3, s3_server, bucket
) -> None:
    """A staged part reaches the disk before its final name does, and the name after (but
    a run's own records, whose loss in a power cut costs nothing stored); a download
    batch's files are synced once, after their renames and before the batch's
    rows exist (a power loss must not leave a renamed but empty file that a row calls
    downloaded). The real calls run; the order of the system calls is recorded."""
    from ingest.records import S3Object
    from ingest.s3 import sync
    from ingest.settings import Settings

    calls: list[tuple[str, str]] = []
    real_fsync, real_replace, real_sync = os.fsync, os.replace, os.sync

    def fsync(fd: int) -> None:
        calls.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def replace(src, dst) -> None:
        calls.append(("replace", str(dst)))
        real_replace(src, dst)

    def sync_spy() -> None:
        calls.append(("sync", ""))
        real_sync()

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "sync", sync_spy)

    key = storage.stage(tmp_path, "r1", "s3_objects", "p", [obj_row("k", "1")])
    assert key is not None
    part = tmp_path / key
    tmp_name = next(c[1] for c in calls if c[0] == "fsync")
    assert calls == [
        ("fsync", tmp_name),
        ("replace", str(part)),
        ("fsync", str(part.parent)),
    ] and tmp_name.endswith(".tmp")

    # A run's own record (a task's timing) marks nothing as stored: renamed, not synced.
    from datetime import UTC, datetime

    from ingest.records import TaskTiming

    calls.clear()
    now = datetime.now(UTC)
    timing = TaskTiming("r1", "f", "t1", "list-objects", started_at=now, ended_at=now)
    key = storage.stage(tmp_path, "r1", "task_timings", "t1", [timing.as_row()])
    assert key is not None and calls == [("replace", str(tmp_path / key))]

    for i in range(3):
        s3.put_object(Bucket=bucket, Key=f"d/{i}.txt", Body=f"body {i}".encode())
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    objects = [
        S3Object(bucket, o["Key"], o["ETag"].strip('"'), o["Size"], o["LastModified"])
        for o in listed
    ]
    calls.clear()
    settings = Settings(data_dir=tmp_path, s3={"endpoint_url": s3_server.url})
    results = sync.download_batch(
        storage_client(settings), settings.downloads.root(bucket), objects, prefix="", run_id="r2"
    )
    assert [r.status for r in results] == ["downloaded"] * 3
    published = [c for c in calls if c[0] == "replace" and c[1].endswith(".txt")]
    assert len(published) == 3 and calls[-1] == ("sync", "")
    assert calls.count(("sync", "")) == 1  # once per batch, not per file


def storage_client(settings):
    from ingest import s3 as s3_lib

    return s3_lib.S3Connection.open(settings.s3)


def test_a_first_listing_starts_with_small_chunks_a_night_does_not(tmp_path: Path) -> None:
    """Small first chunks (downloads start early) only when most objects will be fetched:
    nothing stored under the prefix yet, or a full refresh."""
    settings = Settings(s3={"list_chunk_pages": 10}).with_data_dir(str(tmp_path))

    def pages(run: str, prefix: str = "", **kw: Any) -> list[int]:
        spec = listing.ListSpec(run_id=run, bucket="b", prefix=prefix, **kw)
        with changes.ListingDatabase() as db:  # the run's
            run = listing.S3Run(settings.location, settings.s3, settings.downloads)
            return [listing.chunk_pages(run, spec, i, db) for i in range(5)]

    assert pages("first") == [2, 4, 8, 10, 10]
    storage.stage(tmp_path, "r1", "s3_objects", "batch-0", [obj_row("docs/a", "1")])
    storage.commit_run(tmp_path, "r1")
    assert pages("night") == [10, 10, 10, 10, 10]
    assert pages("night-docs", prefix="docs/") == [10, 10, 10, 10, 10]
    assert pages("other-prefix", prefix="img/") == [2, 4, 8, 10, 10]  # nothing there yet
    assert pages("refresh", full_refresh=True) == [2, 4, 8, 10, 10]
    storage.stage(tmp_path, "r2", "s3_objects", "batch-0", [obj_row("docs/a", "1", "deleted")])
    storage.commit_run(tmp_path, "r2")
    assert pages("all-deleted") == [2, 4, 8, 10, 10]


def github_run(data_dir: Path, run_id: str, pulls: int, fetched: datetime) -> None:
    """Stage what a first GitHub run of one repository stages (ingest.rest.store)."""
    from ingest.rest import store
    from ingest.rest.records import ApiRequest, PageRecord, PullRequest, RepoResult, SyncRecord

    prs = [
        PullRequest.from_api(
            "octo/big",
            {"number": n, "id": n, "title": f"PR {n}", "updated_at": "2026-01-01T00:00:00Z"},
            run_id=run_id,
            fetched_at=fetched,
        )
        for n in range(1, pulls + 1)
    ]
    url = "https://api.test/repos/octo/big/pulls?state=all&per_page=44"
    result = RepoResult(
        repo="octo/big",
        sync=SyncRecord(
            repo="octo/big",
            state="all",
            per_page=44,
            watermark=fetched,
            complete=True,
            stop_reason=None,
            pages=1,
            requests=1,
            not_modified=0,
            items=pulls,
            failed_pages=0,
            run_id=run_id,
            started_at=fetched,
            ended_at=fetched,
        ),
        pulls=prs,
        pages=[
            PageRecord(
                repo="octo/big",
                state="all",
                per_page=44,
                page=1,
                url=url,
                etag='W/"1"',
                link=None,
                items=pulls,
                newest_updated_at=fetched,
                oldest_updated_at=fetched,
                run_id=run_id,
                fetched_at=fetched,
            )
        ],
        requests=[
            ApiRequest(
                run_id=run_id,
                repo="octo/big",
                url=url,
                status=200,
                seconds=0.1,
                bytes=10,
                from_cache=False,
                rate_remaining=4999,
                rate_limit=5000,
                rate_resource="core",
                attempt=1,
                error=None,
                requested_at=fetched,
            )
        ],
    )
    store.write_repo_result(data_dir, run_id, result)


def test_a_first_github_commit_creates_each_table_with_its_rows_in_one_commit(
    tmp_path: Path,
) -> None:
    """A first run's rows: every history table created holding them (version 0, no empty
    table first), every state table created empty and MERGEd into (version 1), every row
    once; the same rows staged by a re-run of the
    night change no state row; a replay of a commit that went through adds nothing."""
    t0 = datetime(2026, 1, 2, tzinfo=UTC)
    github_run(tmp_path, "run1", 480, t0)
    report = storage.commit_run(tmp_path, "run1")
    assert report.rows == {
        "pull_requests": 480,
        "api_requests": 1,
        "github_pages": 1,
        "github_syncs": 1,
    }
    for table in ("pull_requests", "pull_request_log", "api_requests", "github_pages"):
        first = 1 if lake.SPECS[table].kind == "state" else 0
        assert lake.open_table(tmp_path, table).version() == first, table
    assert q(
        tmp_path, "SELECT count(*), count(DISTINCT number), max(title) FROM pull_requests"
    ) == [(480, 480, "PR 99")]
    assert q(tmp_path, "SELECT count(*) FROM pull_request_log") == [(480,)]

    github_run(tmp_path, "run2", 480, t0)  # the same night again: nothing newer
    storage.commit_run(tmp_path, "run2")
    assert lake.open_table(tmp_path, "pull_requests").version() == 1  # MERGE wrote nothing
    assert q(tmp_path, "SELECT count(*), count(DISTINCT number) FROM pull_requests") == [(480, 480)]
    assert q(tmp_path, "SELECT count(DISTINCT run_id) FROM github_syncs") == [(2,)]

    github_run(tmp_path, "run3", 480, t0 + timedelta(hours=1))  # a newer fetch replaces every row
    storage.commit_run(tmp_path, "run3")
    assert q(tmp_path, "SELECT count(*), min(run_id) FROM pull_requests") == [(480, "run3")]


def test_a_commit_that_created_its_tables_is_replayed_without_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process died after the commits, before the staged parts were removed: the
    next commit of the run (its recovery) finds the tables made and writes nothing twice."""
    github_run(tmp_path, "run1", 30, datetime(2026, 1, 2, tzinfo=UTC))
    monkeypatch.setattr(staging, "remove_parts", lambda data_dir, keys: None)
    real_delete = storage.location.LocalFiles.delete

    def keep_manifests(self: Any, keys: list[str]) -> None:
        real_delete(self, [k for k in keys if not k.endswith(".commit")])

    monkeypatch.setattr(storage.location.LocalFiles, "delete", keep_manifests)
    storage.commit_run(tmp_path, "run1")
    monkeypatch.undo()
    storage.commit_run(tmp_path, "run1")  # the replay, from the same manifests
    assert q(tmp_path, "SELECT count(*), count(DISTINCT number) FROM pull_requests") == [(30, 30)]
    assert q(tmp_path, "SELECT count(*) FROM pull_request_log") == [(30,)]
    assert q(tmp_path, "SELECT count(*) FROM api_requests") == [(1,)]
    assert q(tmp_path, "SELECT count(*) FROM github_syncs") == [(1,)]


def test_creating_a_table_made_meanwhile_falls_back_to_a_plain_write(tmp_path: Path) -> None:
    """Two writers creating one table: the second finds it made and writes as usual."""
    rows = pa.Table.from_pylist([timing_row("t1")])
    data = lake.conform(SPECS["task_timings"], rows)
    assert lake.create_with(tmp_path, "task_timings", data)
    assert not lake.create_with(tmp_path, "task_timings", data)  # exists: nothing written
    assert lake.append(tmp_path, "task_timings", rows)
    assert q(tmp_path, "SELECT count(*) FROM task_timings") == [(2,)]


def test_a_merge_keeps_the_newest_row_of_a_key_given_twice(tmp_path: Path) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [obj_row("a", "old", when=t0), obj_row("a", "new", when=t0 + timedelta(1))]
    assert not lake.unique_keys(pa.Table.from_pylist(rows), ["bucket", "key"])
    lake.merge(tmp_path, "s3_objects", pa.Table.from_pylist(rows))  # creates the table
    assert q(tmp_path, "SELECT key, etag FROM s3_objects") == [("a", "new")]


def test_filling_a_state_table_created_empty_conflicts_with_a_concurrent_writer(
    tmp_path: Path,
) -> None:
    """Two runs creating a state table at once: the one whose version is still the empty
    table finds the other's rows at its commit, writes nothing, and MERGEs instead, so
    each key is held once, by its newest row."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    spec = SPECS["s3_objects"]
    stale = lake.ensure_table(tmp_path, "s3_objects")  # this writer's view: no rows yet
    theirs = [obj_row("a", "theirs", when=t0 + timedelta(1)), obj_row("b", "theirs", when=t0)]
    lake.merge(tmp_path, "s3_objects", pa.Table.from_pylist(theirs))  # the other got there first
    mine = [obj_row("a", "mine", when=t0), obj_row("c", "mine", when=t0)]
    assert not lake.fill_empty(stale, "s3_objects", lake.conform(spec, pa.Table.from_pylist(mine)))
    assert q(tmp_path, "SELECT key, etag FROM s3_objects ORDER BY key") == [
        ("a", "theirs"),
        ("b", "theirs"),
    ]
    lake.merge(tmp_path, "s3_objects", pa.Table.from_pylist(mine))
    assert q(tmp_path, "SELECT key, etag FROM s3_objects ORDER BY key") == [
        ("a", "theirs"),
        ("b", "theirs"),
        ("c", "mine"),
    ]
    # an empty table of its own is filled in one commit, as the MERGE would have
    fresh = lake.ensure_table(tmp_path / "other", "s3_objects")
    assert lake.fill_empty(fresh, "s3_objects", lake.conform(spec, pa.Table.from_pylist(mine)))
    assert q(tmp_path / "other", "SELECT key, etag FROM s3_objects ORDER BY key") == [
        ("a", "mine"),
        ("c", "mine"),
    ]


def test_a_runs_own_records_commit_side_by_side_after_its_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every run ends by committing its freshness row and its flow-run row (a no-op's
    only commits): both after the rows they describe, and at the same time, not one
    after another. Each of the two commits waits at a barrier for the other: committed in
    turn, the first would wait alone until the barrier's timeout broke it."""
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    storage.stage(tmp_path, "run1", "s3_objects", "batch-0", [obj_row("a", "1", when=t0)])
    night = freshness.SourceNight(
        source="s3-ingest", target="s3://b/", state="completed", flow_run_id="run1"
    )
    freshness.record(tmp_path, [night], staged_by="run1")
    history.record_flow_run(
        tmp_path,
        history.FlowRunRecord(
            flow_run_id="run1", flow_name="s3-ingest", deployment_id="", started_at=t0
        ),
    )
    records = {"source_freshness", "flow_runs"}
    barrier = threading.Barrier(len(records), timeout=10)
    events: list[tuple[str, str]] = []
    original = commit._commit_table

    def observed(data_dir: Any, run_id: str, run_name: str, table: str) -> int:
        events.append(("start", table))
        if table in records:
            barrier.wait()  # BrokenBarrierError, raised by commit_run, if alone
        rows = original(data_dir, run_id, run_name, table)
        events.append(("end", table))
        return rows

    monkeypatch.setattr(commit, "_commit_table", observed)
    report = storage.commit_run(tmp_path, "run1")
    assert report.rows == {"s3_objects": 1, "source_freshness": 1, "flow_runs": 1}
    assert events.index(("end", "s3_objects")) < min(events.index(("start", t)) for t in records)
    assert q(tmp_path, "SELECT source, state FROM source_freshness") == [("s3-ingest", "completed")]
    assert q(tmp_path, "SELECT flow_run_id FROM flow_runs") == [("run1",)]


def test_a_nights_log_view_follows_a_commit_that_names_only_its_state_table(
    tmp_path: Path,
) -> None:
    """A run's end refreshes the views of the tables its commit reports; source_freshness's
    commit also appends to source_nights, whose view in warehouse.duckdb must follow."""
    import duckdb

    for n, run in enumerate(("run1", "run2"), 1):
        night = freshness.SourceNight(
            source="s3-ingest", target="s3://b/", state="completed", flow_run_id=run
        )
        freshness.record(tmp_path, [night], staged_by=run)
        report = storage.commit_run(tmp_path, run)
        assert "source_nights" not in report.rows  # the commit names its state table only
        assert storage.refresh_warehouse(tmp_path, tables=report.rows)
        assert q(tmp_path, "SELECT count(*) FROM source_nights") == [(n,)]
        with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
            assert con.execute("SELECT count(*) FROM source_nights").fetchone() == (n,)
            assert con.execute("SELECT count(*) FROM source_freshness").fetchone() == (1,)


def test_two_children_committing_at_once_lose_and_double_no_row(tmp_path: Path) -> None:
    """The nightly's two children end together in one process: each commits its own
    records (flow_runs, source_freshness and its source_nights log, task_timings) and
    refreshes warehouse.duckdb's views of them at the same moment, night after night.
    Neither needs a retry (two threads replacing one view in the file's database at once
    conflicted: "Catalog write-write conflict"), and the lake and the file's views hold
    every row once."""
    import duckdb

    nights = 6
    t0 = datetime(2026, 1, 1, tzinfo=UTC)

    def child(night: int, source: str, barrier: threading.Barrier) -> bool:
        run = f"{source}-{night}"
        when = t0 + timedelta(days=night)
        freshness.record(
            tmp_path,
            [
                freshness.SourceNight(
                    source=source,
                    target=f"{source}://t",
                    state="completed",
                    flow_run_id=run,
                    nightly_run_id=f"nightly-{night}",
                )
            ],
            staged_by=run,
        )
        history.record_flow_run(
            tmp_path,
            history.FlowRunRecord(flow_run_id=run, flow_name=source, started_at=when),
        )
        storage.stage(tmp_path, run, "task_timings", "t", [timing_row(f"{run}-task", when)])
        barrier.wait()
        report = storage.commit_run(tmp_path, run)
        return storage.refresh_warehouse(tmp_path, tables=report.rows, wait_seconds=0)

    for night in range(nights):
        barrier = threading.Barrier(2, timeout=10)
        with ThreadPoolExecutor(2) as pool:
            done = [pool.submit(child, night, s, barrier) for s in ("s3-ingest", "github-pulls")]
            assert [f.result() for f in done] == [True, True]  # raised nothing, views current

    expected = [("github-pulls", nights), ("s3-ingest", nights)]
    by_source = "SELECT {} , count(*) FROM {} GROUP BY 1 ORDER BY 1"
    assert q(tmp_path, by_source.format("flow_name", "flow_runs")) == expected
    assert q(tmp_path, by_source.format("source", "source_nights")) == expected
    assert q(tmp_path, "SELECT count(DISTINCT flow_run_id) FROM source_nights") == [(2 * nights,)]
    assert q(tmp_path, "SELECT count(*) FROM task_timings") == [(2 * nights,)]
    with duckdb.connect(str(tmp_path / "warehouse.duckdb"), read_only=True) as con:
        for sql in (
            by_source.format("flow_name", "flow_runs"),
            by_source.format("source", "source_nights"),
        ):
            assert con.execute(sql).fetchall() == expected
        assert con.execute("SELECT count(*) FROM source_freshness").fetchone() == (2,)
