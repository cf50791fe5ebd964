"""The s3-ingest flow end to end: real moto server process, real Prefect runs,
real Parquet and DuckDB files."""

from __future__ import annotations

import hashlib
import re
import signal
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from dev.servers.s3 import DevServer
from flows.s3_ingest import s3_ingest
from ingest.s3.keys import TMP_DIR_NAME
from tests.helpers import body_for, files_under, harness_api_url, put_many, rows, run_cli

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def ingest(bucket: str, endpoint: str, data_dir: Path, **kw: Any) -> Any:
    return s3_ingest(bucket=bucket, endpoint_url=endpoint, data_dir=str(data_dir), **kw)


def test_pagination_incremental_change_and_delete(s3, s3_server, bucket, data_dir) -> None:
    objects = {f"docs/{i // 100:02d}/file-{i:05d}.txt": body_for(f"k{i}") for i in range(1205)}
    put_many(s3, bucket, objects)
    s3.put_object(Bucket=bucket, Key="docs/folder-marker/", Body=b"")

    first = ingest(bucket, s3_server.url, data_dir, prefix="docs/")
    assert first.counts == {"downloaded": 1205}
    root = data_dir / "objects" / bucket
    on_disk = files_under(root)
    assert on_disk == {k.removeprefix("docs/"): v for k, v in objects.items()}
    assert rows(data_dir, "SELECT count(*) n, count(DISTINCT key) d FROM s3_objects")[0] == {
        "n": 1205,
        "d": 1205,
    }

    s3_server.reset_stats()
    second = ingest(bucket, s3_server.url, data_dir, prefix="docs/")
    assert second.counts == {"skipped": 1205}
    assert s3_server.stats().get("GET object", 0) == 0

    changed, gone = "docs/03/file-00300.txt", "docs/07/file-00700.txt"
    s3.put_object(Bucket=bucket, Key=changed, Body=b"new content")
    s3.delete_object(Bucket=bucket, Key=gone)
    s3_server.reset_stats()
    third = ingest(bucket, s3_server.url, data_dir, prefix="docs/")
    assert third.counts == {"downloaded": 1, "skipped": 1203, "deleted": 1}
    assert s3_server.stats().get("GET object", 0) == 1
    assert (root / "03" / "file-00300.txt").read_bytes() == b"new content"

    latest = rows(
        data_dir, f"SELECT key, status FROM s3_objects WHERE key IN ('{changed}', '{gone}')"
    )
    assert {r["key"]: r["status"] for r in latest} == {changed: "downloaded", gone: "deleted"}
    history = rows(
        data_dir, f"SELECT status FROM s3_object_log WHERE key = '{gone}' ORDER BY ingested_at"
    )
    assert [r["status"] for r in history] == ["downloaded", "deleted"]  # skips are not logged
    # The same night again: still one row per object.
    assert rows(data_dir, "SELECT count(*) n FROM s3_objects")[0]["n"] == 1205


def test_include_exclude(s3, s3_server, bucket, data_dir) -> None:
    put_many(s3, bucket, {k: body_for(k) for k in ["a.pdf", "b.txt", "tmp/c.pdf", "d/e.PDF"]})
    summary = ingest(bucket, s3_server.url, data_dir, include=["*.pdf", "*.PDF"], exclude=["tmp/*"])
    assert summary.counts == {"downloaded": 2}
    assert sorted(files_under(data_dir / "objects" / bucket)) == ["a.pdf", "d/e.PDF"]


def test_hostile_keys_become_error_rows_and_nothing_escapes(
    s3, s3_server, bucket, tmp_path
) -> None:
    hostile = [
        "in/../escape.txt",
        "in/a//b.txt",
        "in/back\\slash.txt",
        "in/ctl\x01.txt",
        "in/./dot",
    ]
    fine = {f"in/ok-{i}.txt": b"fine" for i in range(50)}  # failures stay under 10%
    put_many(s3, bucket, {k: b"evil" for k in hostile} | fine)
    data_dir = tmp_path / "data"
    download_dir = tmp_path / "downloads"
    summary = ingest(bucket, s3_server.url, data_dir, prefix="in/", download_dir=str(download_dir))
    assert summary.counts == {"downloaded": 50, "failed": len(hostile)}
    assert files_under(download_dir) == {k.removeprefix("in/"): v for k, v in fine.items()}
    everything = {p.relative_to(tmp_path).parts[0] for p in tmp_path.rglob("*") if p.is_file()}
    assert everything == {"data", "downloads"}
    failed = rows(data_dir, "SELECT key, error FROM s3_objects WHERE status = 'failed'")
    assert {r["key"] for r in failed} == set(hostile)
    assert all(r["error"].startswith("UnsafeKeyError: unsafe key") for r in failed)


def test_large_object_is_fetched_by_ranges_byte_for_byte(s3, s3_server, bucket, data_dir) -> None:
    big = hashlib.sha256(b"seed").digest() * (40 * 1024 * 1024 // 32)  # 40 MiB
    s3.put_object(Bucket=bucket, Key="big.bin", Body=big)
    s3_server.reset_stats()
    summary = ingest(bucket, s3_server.url, data_dir)
    assert summary.counts == {"downloaded": 1}
    got = (data_dir / "objects" / bucket / "big.bin").read_bytes()
    assert hashlib.sha256(got).hexdigest() == hashlib.sha256(big).hexdigest()
    assert s3_server.stats()["GET object"] == 5  # 40 MB in 8 MiB ranges
    row = rows(data_dir, "SELECT size, attempts FROM s3_objects")[0]
    assert row == {"size": len(big), "attempts": 5}


def test_too_many_failures_fail_the_run_after_storing_the_rows(s3, s3_server, bucket, data_dir):
    put_many(s3, bucket, {"x/../a": b"1", "x/../b": b"2", "ok": b"3"})
    state = ingest(bucket, s3_server.url, data_dir, return_state=True)
    assert state.is_failed()
    assert "2 of 3 objects failed" in state.message
    assert rows(data_dir, "SELECT count(*) n FROM s3_objects WHERE status = 'failed'")[0]["n"] == 2


def test_missing_bucket_fails_the_run_with_what_to_fix(s3_server, data_dir) -> None:
    state = ingest("no-such-bucket-here", s3_server.url, data_dir, return_state=True)
    assert state.is_failed()
    assert "BucketNotFoundError" in state.message or "check the bucket name" in str(
        state.result(raise_on_failure=False)
    )


def test_rejected_credentials_fail_the_run_at_once(data_dir) -> None:
    # moto enforcing IAM authentication: the test's access key is unknown to it.
    with DevServer(env={"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as strict:
        state = ingest("any-bucket", strict.url, data_dir, return_state=True)
        assert strict.stats().get("GET object", 0) == 0
    assert state.is_failed()
    assert "CredentialsError" in state.message
    assert "InvalidAccessKeyId" in state.message
    assert "testing-secret" not in state.message


def test_timing_table_and_artifact(s3, s3_server, bucket, data_dir) -> None:
    objects = {f"t/{i}.bin": body_for(f"t{i}") for i in range(30)}
    put_many(s3, bucket, objects)
    summary = ingest(bucket, s3_server.url, data_dir)
    timings = rows(
        data_dir,
        f"SELECT task_name, sum(items) items, sum(bytes) bytes, min(seconds) s, "
        f"bool_and(state = 'completed') ok FROM task_timings "
        f"WHERE flow_run_id = '{summary.run_id}' GROUP BY task_name",
    )
    by_name = {t["task_name"]: t for t in timings}
    assert {"prepare-storage", "list-objects", "download-batch", "commit-run"} <= set(by_name)
    assert by_name["download-batch"]["items"] == 30
    assert by_name["download-batch"]["bytes"] == sum(len(v) for v in objects.values())
    assert all(t["ok"] and t["s"] >= 0 for t in timings)
    stages = {s["stage"]: s for s in summary.stages}
    assert stages["download-batch"]["items"] == 30


@pytest.fixture(scope="module")
def faulty_server(_clean_environment: None):
    faults = [
        "503:flaky:2",
        "500:err500:1",
        "cut:cut:1",
        "corrupt:corrupt-once:1",
        "corrupt:corrupt-always:99",
    ]
    with DevServer(faults=faults) as server:
        yield server


def test_injected_faults_are_retried_and_every_object_is_correct(faulty_server, data_dir) -> None:
    import boto3

    client = boto3.client("s3", endpoint_url=faulty_server.url, region_name="us-east-1")
    client.create_bucket(Bucket="faulty")
    objects = {
        f"{kind}-{i}.bin": body_for(f"{kind}{i}", 200_000)
        for kind in ("flaky", "err500", "cut", "plain")
        for i in range(5)
    }
    put_many(client, "faulty", objects)

    summary = ingest("faulty", faulty_server.url, data_dir)
    assert summary.counts == {"downloaded": len(objects)}
    assert files_under(data_dir / "objects" / "faulty") == objects
    attempts = {
        r["key"]: r["attempts"] for r in rows(data_dir, "SELECT key, attempts FROM s3_objects")
    }
    assert all(attempts[f"flaky-{i}.bin"] == 3 for i in range(5))  # two 503s, then 200
    assert all(attempts[f"err500-{i}.bin"] == 2 for i in range(5))
    assert all(attempts[f"cut-{i}.bin"] == 2 for i in range(5))  # resumed with a Range GET
    assert all(attempts[f"plain-{i}.bin"] == 1 for i in range(5))
    stats = faulty_server.stats()
    assert stats["fault 503"] == 10 and stats["fault cut"] == 5


def test_corrupted_body_is_fetched_again_or_becomes_an_error_row(
    faulty_server, data_dir, monkeypatch
) -> None:
    import boto3

    # One retry after the first request: a body failing its check is fetched twice.
    monkeypatch.setenv("INGEST_S3_MAX_ATTEMPTS", "1")

    client = boto3.client("s3", endpoint_url=faulty_server.url, region_name="us-east-1")
    client.create_bucket(Bucket="mangled")
    once, always = body_for("c1", 5000), body_for("c2", 5000)
    fine = {f"ok-{i}.bin": b"ok" for i in range(20)}
    put_many(client, "mangled", {"corrupt-once.bin": once, "corrupt-always.bin": always} | fine)
    summary = ingest("mangled", faulty_server.url, data_dir)
    assert summary.counts == {"downloaded": 21, "failed": 1}
    root = data_dir / "objects" / "mangled"
    assert (root / "corrupt-once.bin").read_bytes() == once
    assert not (root / "corrupt-always.bin").exists()
    failed = rows(data_dir, "SELECT key, error, attempts FROM s3_objects WHERE status = 'failed'")
    assert [(r["key"], r["attempts"]) for r in failed] == [("corrupt-always.bin", 2)]
    assert "IntegrityError" in failed[0]["error"]
    assert "MD5" in failed[0]["error"] and "differs from the ETag" in failed[0]["error"]


def _api_env() -> dict[str, str]:
    return {"PREFECT_API_URL": harness_api_url()}


def test_two_runs_at_the_same_time(s3, s3_server, bucket, data_dir) -> None:
    objects = {f"c/{i}.bin": body_for(f"c{i}", 20_000) for i in range(400)}
    put_many(s3, bucket, objects)
    args = ["s3", "--bucket", bucket, "--endpoint-url", s3_server.url, "--data-dir", str(data_dir)]
    procs = [run_cli([*args, "--concurrency", "8"], env=_api_env()) for _ in range(2)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    assert files_under(data_dir / "objects" / bucket) == objects
    latest = rows(
        data_dir,
        "SELECT count(*) n, count(DISTINCT key) d, count(DISTINCT run_id) r FROM s3_objects",
    )[0]
    assert latest["n"] == latest["d"] == 400
    # Each run logs exactly what it says it downloaded; the second to take the target's
    # lease (INGEST_S3_SAME_TARGET=wait) found the first's commit: every object was
    # downloaded once, by one of them, and no row of either is lost.
    said = {}
    for out in outputs:
        found = re.search(r"run (\S+): 400 objects \(([^)]*)\)", out)
        assert found, out
        run_id, counts = found.groups()
        said[run_id] = int(m[1]) if (m := re.search(r"downloaded (\d+)", counts)) else 0
    logged = rows(
        data_dir,
        "SELECT run_id, count(*) n FROM s3_object_log WHERE status = 'downloaded' GROUP BY 1",
    )
    assert {r["run_id"]: r["n"] for r in logged} == {k: v for k, v in said.items() if v}
    assert sorted(said.values()) == [0, 400]


def test_run_killed_half_way_then_rerun(s3, bucket, data_dir) -> None:
    objects = {f"k/{i:04d}.bin": body_for(f"kill{i}", 30_000) for i in range(300)}
    put_many(s3, bucket, objects)
    with DevServer(latency_ms=40) as slow:
        # The slow server shares nothing with the session server: seed it too.
        import boto3

        client = boto3.client("s3", endpoint_url=slow.url, region_name="us-east-1")
        client.create_bucket(Bucket=bucket)
        put_many(client, bucket, objects)
        proc = run_cli(
            [
                "s3",
                "--bucket",
                bucket,
                "--endpoint-url",
                slow.url,
                "--data-dir",
                str(data_dir),
                "--concurrency",
                "4",
            ],
            env={**_api_env(), "INGEST_S3_BATCH_SIZE": "10"},
        )
        parts = data_dir / "staging"
        deadline = time.monotonic() + 120
        while not list(parts.glob("*/s3_objects/*.parquet")) and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            time.sleep(0.05)  # polling for an observable event, then killing at once
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL

        # What the killed run left is consistent: whole files and whole Parquet parts only.
        root = data_dir / "objects" / bucket
        visible = {k: v for k, v in files_under(root).items() if not k.startswith(TMP_DIR_NAME)}
        assert 0 < len(visible) < len(objects)
        assert all(objects[k] == v for k, v in visible.items())
        staged = list(parts.glob("*/s3_objects/*.parquet"))
        done_before = sum(pq.read_table(p).num_rows for p in staged)  # whole parts only
        assert 0 < done_before < len(objects)
        assert rows(data_dir, "SELECT count(*) n FROM s3_objects")[0]["n"] == 0  # uncommitted

        summary = ingest(bucket, slow.url, data_dir, concurrency=64)
    # The dead run's staged rows were committed first: what it fetched is not fetched again.
    assert summary.counts == {"skipped": done_before, "downloaded": len(objects) - done_before}
    assert files_under(root) == objects  # temp files of the dead run were swept
    latest = rows(data_dir, "SELECT count(*) n, count(DISTINCT key) d FROM s3_objects")[0]
    assert latest == {"n": 300, "d": 300}
