"""The lake on object storage: ``--data-dir s3://bucket/prefix`` on a second S3-compatible
server (its own endpoint and bucket, apart from the source's), real moto processes on
loopback, real Prefect runs, real Delta commits."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dev.servers.s3 import DevServer, free_port
from ingest import storage
from ingest.errors import CredentialsError, EndpointError
from ingest.settings import Settings
from ingest.storage import lake, location
from tests.helpers import ROOT, put_many


@pytest.fixture(scope="module")
def lake_server(_clean_environment: None) -> Iterator[DevServer]:
    """The lake's own S3-compatible server (another endpoint than the source bucket's)."""
    with DevServer() as server:
        yield server


@pytest.fixture
def lake_uri(lake_server: DevServer) -> str:
    name = f"lake-{uuid.uuid4().hex[:10]}"
    client(lake_server).create_bucket(Bucket=name)
    return f"s3://{name}/nightly"


def client(server: DevServer) -> Any:
    return boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")


def lake_env(lake_server: DevServer, lake_uri: str) -> dict[str, str]:
    return {"INGEST_DATA_DIR": lake_uri, "INGEST_LAKE_ENDPOINT_URL": lake_server.url}


def lake_at(lake_server: DevServer, lake_uri: str, local: Path) -> storage.LakeLocation:
    """The lake as one machine reaches it: through a session of its own (as a run's or a
    command's), which resolves the credentials and makes the client once."""
    loc = Settings(
        data_dir=lake_uri, lake={"endpoint_url": lake_server.url}, local_dir=local
    ).location
    return loc.bound(location.LakeSession(loc))


def keys_under(server: DevServer, uri: str) -> list[str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    pages = client(server).get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
    return [o["Key"][len(prefix) + 1 :] for p in pages for o in p.get("Contents", ())]


def cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``ingest ...`` in its own process and folder, as on another machine: the settings
    given are its only INGEST_* ones."""
    own = {k: v for k, v in os.environ.items() if not k.startswith("INGEST_")}
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args],
        cwd=cwd,
        env={**own, "PYTHONPATH": str(ROOT), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def timing_rows(n: int, writer: str) -> list[dict[str, Any]]:
    now = datetime.now(UTC)
    return [
        {
            "flow_run_id": writer,
            "flow_name": "t",
            "task_run_id": f"{writer}-{i}",
            "task_name": "x",
            "started_at": now,
            "ended_at": now,
            "seconds": 0.0,
        }
        for i in range(n)
    ]


def test_the_store_honours_conditional_writes(lake_server, lake_uri, tmp_path) -> None:
    """What commits and claims rely on: a create-if-absent wins once, even when racing."""
    loc = lake_at(lake_server, lake_uri, tmp_path)
    files = location.files(loc)
    assert files.create("claims/a", b"first")
    assert not files.create("claims/a", b"second")
    assert files.get("claims/a") == b"first"

    won: list[int] = []
    barrier = threading.Barrier(8)

    def race(i: int) -> None:
        barrier.wait()
        if files.create("claims/race", str(i).encode()):
            won.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    assert files.get("claims/race") == str(won[0]).encode()


_WRITER = textwrap.dedent(
    """
    import sys
    from datetime import UTC, datetime
    from pathlib import Path
    import pyarrow as pa
    from ingest import catalog
    from ingest.settings import Settings
    from ingest.storage import lake

    catalog.load()

    uri, endpoint, writer, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    loc = Settings(data_dir=uri, lake={"endpoint_url": endpoint}, local_dir=Path(".")).location
    now = datetime.now(UTC)
    for i in range(rounds):
        rows = pa.Table.from_pylist([{
            "flow_run_id": writer, "flow_name": "t", "task_run_id": f"{writer}-{i}",
            "task_name": "x", "started_at": now, "ended_at": now, "seconds": 0.0,
        }])
        lake.append(loc, "task_timings", rows, txn=(f"writer:{writer}", i + 1))
        source = {"source": f"{writer}-{i % 3}", "target": "t", "checked_at": now}
        key = pa.Table.from_pylist([source])
        lake.merge(loc, "source_freshness", key)
    """
)


def test_two_processes_commit_to_one_table_and_nothing_is_lost(
    lake_server, lake_uri, tmp_path
) -> None:
    loc = lake_at(lake_server, lake_uri, tmp_path)
    lake.ensure_table(loc, "task_timings")  # both writers race for versions, not creation
    rounds = 5
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _WRITER, lake_uri, lake_server.url, w, str(rounds)],
            cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for w in ("a", "b")
    ]
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out
    got = storage.query(loc, "SELECT task_run_id FROM task_timings ORDER BY 1")[1]
    assert [r[0] for r in got] == sorted(f"{w}-{i}" for w in "ab" for i in range(rounds))
    dt = lake.open_table(loc, "task_timings")
    assert dt is not None and dt.version() == 2 * rounds  # one version each, none overwritten
    commits = [k for k in keys_under(lake_server, lake_uri) if k.endswith(".json")]
    assert sum(k.startswith("lake/task_timings/_delta_log/") for k in commits) == 2 * rounds + 1
    sources = storage.query(loc, "SELECT source FROM source_freshness ORDER BY 1")[1]
    assert [r[0] for r in sources] == [f"{w}-{i}" for w in "ab" for i in range(3)]


def test_stray_objects_under_the_prefix_are_never_read(lake_server, lake_uri, tmp_path) -> None:
    loc = lake_at(lake_server, lake_uri, tmp_path)
    storage.stage(loc, "run1", "task_timings", "p", timing_rows(2, "r1"))
    assert storage.commit_run(loc, "run1").rows == {"task_timings": 2}
    s3 = client(lake_server)
    bucket, prefix = loc.bucket, loc.prefix
    sink = pa.BufferOutputStream()
    pq.write_table(pa.Table.from_pylist(timing_rows(5, "stray")), sink)
    stray = sink.getvalue().to_pybytes()
    day = datetime.now(UTC).date().isoformat()
    for key in (
        f"lake/task_timings/day={day}/part-stray.parquet",  # a file no commit added
        "lake/task_timings/_delta_log/README",
        "lake/flow_runs/part-foreign.parquet",  # a folder with no Delta log
        "lake/other__thing/part-0.parquet",  # a resource table that was never written
    ):
        s3.put_object(Bucket=bucket, Key=prefix + key, Body=stray)
    s3.put_object(Bucket=bucket, Key=prefix + "staging/_quarantine/x.parquet", Body=b"junk")

    assert storage.query(loc, "SELECT count(*) FROM task_timings")[1] == [(2,)]
    assert storage.query(loc, "SELECT count(*) FROM flow_runs")[1] == [(0,)]
    assert storage.query(loc, 'SELECT count(*) FROM "other__thing"')[1] == [(0,)]
    assert all("stray" not in f for f in lake.data_files(loc, "task_timings"))
    assert "flow_runs" not in lake.tables_present(loc)
    assert storage.recover(loc, stale_after=0) == []  # _quarantine is no run


def test_a_killed_runs_staging_is_committed_by_the_next_run_elsewhere(
    lake_server, lake_uri, tmp_path
) -> None:
    """Staged parts live in the lake: a run on another machine commits a dead run's rows,
    deciding by the heartbeat's age alone (never by a process id)."""
    machine_a = lake_at(lake_server, lake_uri, tmp_path / "a")
    machine_b = lake_at(lake_server, lake_uri, tmp_path / "b")
    storage.stage(machine_a, "dead", "task_timings", "p1", timing_rows(3, "dead"))
    storage.staging.touch(machine_a, "dead")
    assert storage.prepare(machine_b, current_run="b1", stale_after=60) == []  # alive
    assert storage.prepare(machine_b, current_run="b1", stale_after=0.001) == ["dead"]
    assert storage.query(machine_b, "SELECT count(*) FROM task_timings")[1] == [(3,)]
    assert not [k for k in keys_under(lake_server, lake_uri) if k.startswith("staging/dead/")]
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("*.parquet"))


def test_a_lake_that_cannot_be_reached_names_the_setting(
    lake_server, tmp_path, monkeypatch
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    result = cli(
        ["query", "SELECT 1", "--data-dir", "s3://lake-nowhere/x"],
        tmp_path,
        {"INGEST_LAKE_ENDPOINT_URL": down},
    )
    assert result.returncode == 2
    assert "INGEST_LAKE_ENDPOINT_URL" in result.stderr and down in result.stderr
    assert "Traceback" not in result.stderr
    from tasks.storage import run_staging

    with (
        pytest.raises(EndpointError, match="INGEST_LAKE_ENDPOINT_URL"),
        run_staging(Settings(data_dir="s3://lake-x/p", lake={"endpoint_url": down}), "r1"),
    ):
        pass  # a flow's run never starts: the error is the first thing it says

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    no_keys = Settings(data_dir="s3://lake-y/p", lake={"endpoint_url": lake_server.url}).location
    with pytest.raises(CredentialsError, match="INGEST_LAKE_CREDENTIALS_BLOCK"):
        location.check(no_keys)
    assert not Path("s3:").exists()


@pytest.mark.flow
@pytest.mark.usefixtures("prefect_harness")
def test_s3_ingest_into_a_lake_on_object_storage(
    s3, s3_server, bucket, lake_server, lake_uri, tmp_path, monkeypatch
) -> None:
    from flows.s3_ingest import s3_ingest

    objects = {f"docs/{i:03d}.txt": f"doc {i}: drawing of valve V-{i}".encode() for i in range(40)}
    put_many(s3, bucket, objects)
    machine_a = tmp_path / "machine-a"
    settings = {**lake_env(lake_server, lake_uri), "INGEST_LOCAL_DIR": str(machine_a)}
    for name, value in settings.items():
        monkeypatch.setenv(name, value)

    first = s3_ingest(bucket=bucket, endpoint_url=s3_server.url, prefix="docs/", data_dir=lake_uri)
    assert first.counts == {"downloaded": 40}
    stored = keys_under(lake_server, lake_uri)
    tables = ("s3_objects", "s3_object_log", "documents", "document_log", "task_timings")
    for table in (*tables, "flow_runs"):
        assert f"lake/{table}/_delta_log/00000000000000000000.json" in stored, table
    assert not [k for k in stored if k.startswith("staging/")]  # committed and cleaned up
    # On this machine: the downloads and rebuildable caches only, no table and no staging.
    local = {p.relative_to(machine_a).parts[0] for p in machine_a.rglob("*") if p.is_file()}
    assert local <= {"objects", "warehouse.duckdb", ".warehouse-views", "search.sqlite"}
    assert not list(machine_a.rglob("*.parquet")) and not (ROOT / "s3:").exists()

    s3_server.reset_stats()
    again = s3_ingest(bucket=bucket, endpoint_url=s3_server.url, prefix="docs/", data_dir=lake_uri)
    assert again.counts == {"skipped": 40}
    assert s3_server.stats().get("GET object", 0) == 0

    # A third machine: an empty folder and the settings, nothing else.
    machine_c = tmp_path / "machine-c"
    machine_c.mkdir()
    env = lake_env(lake_server, lake_uri)
    sql = "SELECT count(*) n, count(DISTINCT key) k FROM s3_objects WHERE status = 'downloaded'"
    out = cli(["query", sql, "--format", "csv"], machine_c, env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["n,k", "40,40"]
    found = cli(["search", "valve", "--format", "json", "-n", "100"], machine_c, env)
    assert found.returncode == 0, found.stderr
    assert len(__import__("json").loads(found.stdout)) == 40
    assert (machine_c / "data" / "search.sqlite").exists()  # the index lives where it is used
    # `ingest status` reads the same way (in this process, with machine C's settings).
    from ingest.report import status

    elsewhere = lake_at(lake_server, lake_uri, machine_c / "data")
    # every run updates its source's freshness, on the lake wherever it is
    [fresh] = status.freshness_now(elsewhere)
    assert (fresh["source"], fresh["target"], fresh["state"]) == (
        "s3-ingest",
        f"s3://{bucket}/docs/",
        "completed",
    )
    runs = storage.query(elsewhere, "SELECT count(*) FROM flow_runs")[1]
    assert runs == [(2,)]
    # each run's end gave its freshness rows on the lake its flow_runs figure (Prefect's)
    figures = {
        table: dict(storage.query(elsewhere, f"SELECT flow_run_id, seconds FROM {table}")[1])
        for table in ("flow_runs", "source_nights")
    }
    assert figures["source_nights"] == figures["flow_runs"], figures
    # `ingest warehouse`: a snapshot the stock duckdb reads offline, with no extension.
    copied = storage.snapshot_warehouse(elsewhere)
    assert copied["s3_objects"] == 40 and copied["flow_runs"] == 2
    import duckdb

    with duckdb.connect(str(machine_c / "data" / "warehouse.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM documents").fetchone() == (40,)
        assert con.execute("SELECT lake FROM lake_snapshot").fetchone() == (lake_uri,)
