"""s3-ingest on a real Dask cluster: ``dask scheduler`` and two ``dask worker``
processes under their nannies (Dask's default: each worker a daemonic process), each
in a folder of its own with no file shared with the others or with the flow (as
separate machines), a moto S3 server process for the source bucket and another for
the lake (``s3://lake-.../nightly``, so that the source's request counters count the
source's requests only), and a Prefect server.

The short scenarios run in ``make test`` (a run, then a rerun; a batch whose parsers
crash, exit and hang); the long ones (the ``ingest`` command from three folders,
downloads to object storage, a worker killed mid-run) carry the ``cluster`` marker:
``make test-cluster``.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.servers.dask_cluster import DaskCluster
from dev.servers.s3 import DevServer
from ingest.settings import Settings
from ingest.storage import LakeLocation
from tests.helpers import batch_of, harness_api_url, put_many, rows

HOOK = "tests.extract_support:misbehaving_extractor"

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

TEXT_KEYS = 24  # text files, each with a sentence naming its key


@pytest.fixture(scope="module")
def lake_server(_clean_environment: None) -> Iterator[DevServer]:
    with DevServer() as server:
        yield server


def lake_bucket(server: DevServer, local: Path) -> tuple[str, LakeLocation]:
    """A new bucket for the lake on ``server``; its URI and its location for queries."""
    import boto3

    name = f"lake-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=server.url, region_name="us-east-1").create_bucket(Bucket=name)
    uri = f"s3://{name}/nightly"
    return uri, Settings(data_dir=uri, lake={"endpoint_url": server.url}, local_dir=local).location


def seed(s3: Any, bucket: str, n: int = TEXT_KEYS, prefix: str = "docs/") -> dict[str, str]:
    """``n`` small text objects; returns key -> the sentence inside it."""
    s3.create_bucket(Bucket=bucket)
    sentences = {f"{prefix}{i:03d}/note-{i:03d}.txt": f"drawing note {i:03d}" for i in range(n)}
    put_many(s3, bucket, {k: v.encode() for k, v in sentences.items()})
    return sentences


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, prefect_harness: None
) -> Iterator[DaskCluster]:
    root = tmp_path_factory.mktemp("cluster")
    with DaskCluster(root, workers=2, env={"PREFECT_API_URL": harness_api_url()}) as c:
        yield c


def who_am_i() -> tuple[bool, int]:
    """Run on each Dask worker: is its process daemonic (a nanny's worker), and its pid."""
    return multiprocessing.current_process().daemon, os.getpid()


def on_each_worker(cluster: DaskCluster) -> dict[str, tuple[bool, int]]:
    from distributed import Client

    with Client(cluster.address, timeout=30) as client:
        info = client.scheduler_info(n_workers=-1)["workers"]
        return {str(info[a]["name"]): v for a, v in client.run(who_am_i).items()}


def test_batches_spread_over_two_workers_and_a_rerun_gets_nothing(
    s3: Any,
    s3_server: DevServer,
    lake_server: DevServer,
    cluster: DaskCluster,
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    from flows.s3_ingest import s3_ingest

    # Stock workers: each under its nanny, a daemonic process, with no setting changed.
    assert {name: daemon for name, (daemon, _pid) in on_each_worker(cluster).items()} == {
        "w1": True,
        "w2": True,
    }
    bucket = f"src-{uuid.uuid4().hex[:10]}"
    sentences = seed(s3, bucket)
    uri, lake = lake_bucket(lake_server, tmp_path / "local")
    monkeypatch.setenv("INGEST_DASK_ADDRESS", cluster.address)
    monkeypatch.setenv("INGEST_LAKE_ENDPOINT_URL", lake_server.url)
    monkeypatch.setenv("INGEST_S3_BATCH_SIZE", "3")  # 8 batches for 2 workers x 2 threads

    def run() -> Any:
        return s3_ingest(
            bucket=bucket,
            endpoint_url=s3_server.url,
            data_dir=uri,
            task_runner="dask",
            keep_files=False,
        )

    first = run()
    assert first.counts == {"downloaded": TEXT_KEYS}
    objects = rows(lake, "SELECT key, status, local_path FROM s3_objects")
    assert {r["key"] for r in objects} == set(sentences)
    assert all(r["status"] == "downloaded" and r["local_path"] is None for r in objects)
    docs = rows(lake, "SELECT key, status, text FROM documents")
    assert {r["key"]: r["text"].strip() for r in docs} == sentences
    workers = rows(
        lake,
        "SELECT worker, count(*) n FROM task_timings WHERE task_name = 'fetch-batch' GROUP BY ALL",
    )
    assert {r["worker"] for r in workers} == {"w1", "w2"}, workers
    assert sum(r["n"] for r in workers) == 8
    # The listing and the commit stayed in the flow's process, never on a worker.
    others = rows(lake, "SELECT DISTINCT worker FROM task_timings WHERE task_name = 'list-objects'")
    assert others and not {r["worker"] for r in others} & {"w1", "w2"}
    # No worker left a file in its folder (the downloads were dropped after extraction).
    for name in cluster.names:
        assert not [p for p in cluster.temp_folder(name).rglob("*") if p.is_file()]

    s3_server.reset_stats()
    second = run()
    assert second.counts == {"skipped": TEXT_KEYS}
    assert s3_server.stats().get("GET object", 0) == 0


def test_a_moved_folder_on_the_cluster_takes_the_stored_rows_with_no_get_and_no_parse(
    s3: Any,
    s3_server: DevServer,
    lake_server: DevServer,
    cluster: DaskCluster,
    tmp_path: Path,
    monkeypatch: Any,
) -> None:
    """Files not kept, batches on the workers, the lake on object storage: after a folder
    is renamed in the bucket, the moved keys take the stored objects' rows (``copied``, no
    path) and documents under their new keys; no object GET, no batch task at all."""
    from flows.s3_ingest import s3_ingest

    bucket = f"src-{uuid.uuid4().hex[:10]}"
    sentences = seed(s3, bucket, prefix="old/")
    uri, lake = lake_bucket(lake_server, tmp_path / "local")
    monkeypatch.setenv("INGEST_DASK_ADDRESS", cluster.address)
    monkeypatch.setenv("INGEST_LAKE_ENDPOINT_URL", lake_server.url)

    def run() -> Any:
        return s3_ingest(
            bucket=bucket,
            endpoint_url=s3_server.url,
            data_dir=uri,
            task_runner="dask",
            keep_files=False,
        )

    assert run().counts == {"downloaded": TEXT_KEYS}
    for old in sentences:
        new = "new/" + old.removeprefix("old/")
        s3.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        s3.delete_object(Bucket=bucket, Key=old)
    s3_server.reset_stats()
    second = run()
    assert second.counts == {"copied": TEXT_KEYS, "deleted": TEXT_KEYS}
    assert s3_server.stats().get("GET object", 0) == 0
    assert not [s for s in second.stages if s["stage"] == "fetch-batch"]  # no download, no parse
    copied = rows(lake, "SELECT key, local_path FROM s3_objects WHERE status = 'copied'")
    assert sorted(r["key"] for r in copied) == sorted("new/" + k[4:] for k in sentences)
    assert all(r["local_path"] is None for r in copied)
    docs = rows(lake, "SELECT key, text FROM documents WHERE status = 'ok' AND key LIKE 'new/%'")
    assert {r["key"]: r["text"].strip() for r in docs} == {
        "new/" + k[4:]: v for k, v in sentences.items()
    }
    gone = rows(lake, "SELECT DISTINCT status FROM documents WHERE key LIKE 'old/%'")
    assert gone == [{"status": "deleted"}]


def test_parsers_that_crash_exit_or_hang_on_a_nanny_worker_cost_one_row_each(
    s3: Any, s3_server: DevServer, lake_server: DevServer, cluster: DaskCluster, tmp_path: Path
) -> None:
    """One fetch-batch on the cluster with the test hook as its extractor: a segfault, an
    ``os._exit`` and a hang past the time limit in the extraction workers of a nanny's
    (daemonic) Dask worker; each is one row, the rest of the batch is extracted, and the
    Dask workers themselves live on (same processes: no nanny restart)."""
    from distributed import Client
    from prefect import flow

    from ingest import context
    from ingest.s3.scan import ListSpec
    from ingest.storage import staging
    from tasks.runners import batch_runner, submit
    from tasks.s3 import fetch_batch

    before = on_each_worker(cluster)
    assert all(daemon for daemon, _pid in before.values())
    bucket = f"src-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    names = ["a-good.txt", "b-crash.txt", "c-hang.txt", "d-exit.txt", "e-good.txt"]
    bodies = {f"in/{n}": f"note of {n}" for n in names}
    put_many(s3, bucket, {k: v.encode() for k, v in bodies.items()})
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    batch = batch_of(bucket, listed)
    uri, lake = lake_bucket(lake_server, tmp_path / "local")
    settings = Settings(
        data_dir=uri,
        lake={"endpoint_url": lake_server.url},
        s3={"endpoint_url": s3_server.url},
        extract={"workers": 2, "time_limit": 3},
        local_dir=tmp_path / "local",
        task_runner="dask",
        dask_address=cluster.address,
        keep_files=False,
    )
    run_id = f"faults-{uuid.uuid4().hex[:8]}"

    @flow
    def one_batch_on_the_cluster() -> Any:
        with batch_runner(settings, run_id=run_id) as runner:
            spec = ListSpec(run_id=run_id, bucket=bucket, prefix="in/")
            done = submit(
                runner,
                fetch_batch,
                settings=settings,
                spec=spec,
                batch=batch,
                extract=True,
                extractor=HOOK,
            ).result()
            return done, runner.client.run(context.open_runs)

    summary, opened = one_batch_on_the_cluster()
    assert summary.counts == {"downloaded": len(names)}
    docs = staging.read_parts(lake, staging.parts(lake, run_id, "documents"), "documents")
    by_key = {r["key"]: r for r in docs.to_pylist()}
    assert sorted(by_key) == sorted(bodies) and docs.num_rows == len(names)  # one row each
    crash, hang, exit_ = by_key["in/b-crash.txt"], by_key["in/c-hang.txt"], by_key["in/d-exit.txt"]
    assert crash["status"] == "failed" and "parser crashed" in crash["error"], crash
    assert "SIGSEGV" in crash["error"]
    assert exit_["status"] == "failed" and "exited with code 70" in exit_["error"], exit_
    assert hang["status"] == "timeout" and "3 s time limit" in hang["error"], hang
    for key in ("in/a-good.txt", "in/e-good.txt"):
        assert by_key[key]["status"] == "ok" and by_key[key]["text"].strip() == bodies[key]
    assert summary.extracted.counts == {"ok": 2, "failed": 2, "timeout": 1}
    assert on_each_worker(cluster) == before  # the Dask workers were never restarted
    # The context the batch opened on its worker (its S3 connection) was closed with the run.
    assert [w for w, runs in opened.items() if run_id in runs], opened
    with Client(cluster.address, timeout=30) as client:
        assert all(run_id not in runs for runs in client.run(context.open_runs).values())


@pytest.mark.cluster
def test_a_local_cluster_with_dask_defaults_extracts(
    s3: Any, s3_server: DevServer, tmp_path: Path, monkeypatch: Any
) -> None:
    """No address: a LocalCluster started by the run, with Dask's defaults (processes under
    nannies, daemonic), extracts every document; no Dask setting is changed for it."""
    import dask
    import distributed  # noqa: F401 (its defaults join dask's configuration)

    from flows.s3_ingest import s3_ingest

    monkeypatch.delenv("DASK_DISTRIBUTED__WORKER__DAEMON", raising=False)
    assert dask.config.get("distributed.worker.daemon") is True
    bucket = f"src-{uuid.uuid4().hex[:10]}"
    sentences = seed(s3, bucket, n=6)
    monkeypatch.setenv("INGEST_S3_BATCH_SIZE", "3")
    result = s3_ingest(
        bucket=bucket,
        endpoint_url=s3_server.url,
        data_dir=str(tmp_path / "lake"),
        task_runner="dask",
    )
    assert result.counts == {"downloaded": 6}
    docs = rows(tmp_path / "lake", "SELECT key, status, text FROM documents")
    assert {r["key"]: (r["status"], r["text"].strip()) for r in docs} == {
        k: ("ok", v) for k, v in sentences.items()
    }


# --- the long scenarios (make test-cluster) -----------------------------------------


def ingest_cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    """The ``ingest`` command started in ``cwd``, as a person on that machine would."""
    cwd.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [str(Path(sys.executable).with_name("ingest")), *args],
        cwd=cwd,
        env={**os.environ, "PREFECT_API_URL": harness_api_url(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out[-4000:]
    return out


def timings(lake: Path, task: str) -> list[dict[str, Any]]:
    return rows(
        lake,
        f"SELECT worker, started_at, ended_at, state FROM task_timings WHERE task_name = '{task}'",
    )


@pytest.mark.cluster
def test_command_from_three_folders_with_downloads_on_object_storage(
    s3: Any, s3_server: DevServer, lake_server: DevServer, cluster: DaskCluster, tmp_path: Path
) -> None:
    bucket, dest = f"src-{uuid.uuid4().hex[:10]}", f"dl-{uuid.uuid4().hex[:10]}"
    sentences = seed(s3, bucket)
    s3.create_bucket(Bucket=dest)
    uri, lake = lake_bucket(lake_server, tmp_path / "local")
    env = {
        "INGEST_DASK_ADDRESS": cluster.address,
        "INGEST_S3_BATCH_SIZE": "4",
        "INGEST_LAKE_ENDPOINT_URL": lake_server.url,
    }
    args = ["s3", "--bucket", bucket, "--prefix", "docs/", "--endpoint-url", s3_server.url]
    args += ["--data-dir", uri, "--download-dir", f"s3://{dest}/objects"]
    args += ["--task-runner", "dask"]

    out = finish(ingest_cli(args, tmp_path / "flow", env))
    assert "downloaded" in out
    stored = rows(lake, "SELECT key, status, local_path FROM s3_objects")
    assert {r["key"]: r["local_path"] for r in stored} == {
        k: f"s3://{dest}/objects/{k.removeprefix('docs/')}" for k in sentences
    }
    for key, text in sentences.items():  # every object copied whole to the destination
        copy = s3.get_object(Bucket=dest, Key=f"objects/{key.removeprefix('docs/')}")
        assert copy["Body"].read() == text.encode()
    docs = rows(lake, "SELECT key, text FROM documents WHERE status = 'ok'")
    assert {r["key"]: r["text"].strip() for r in docs} == sentences
    assert {r["worker"] for r in timings(lake, "fetch-batch")} == {"w1", "w2"}

    s3_server.reset_stats()
    finish(ingest_cli(args, tmp_path / "flow", env))
    assert s3_server.stats().get("GET object", 0) == 0

    sql = "SELECT count(*) AS n, count(DISTINCT key) AS k FROM s3_objects"
    query = ["query", sql, "--data-dir", uri, "--format", "json"]
    elsewhere = {"INGEST_LAKE_ENDPOINT_URL": lake_server.url}
    answer = json.loads(finish(ingest_cli(query, tmp_path / "elsewhere", elsewhere), timeout=120))
    assert answer == [{"n": TEXT_KEYS, "k": TEXT_KEYS}]


@pytest.mark.cluster
def test_a_worker_killed_mid_run_loses_nothing(lake_server: DevServer, tmp_path: Path) -> None:
    import boto3

    n, batch = 120, 6
    with (
        DevServer(latency_ms=100) as slow,
        DaskCluster(
            tmp_path / "cluster", workers=2, env={"PREFECT_API_URL": harness_api_url()}
        ) as c,
    ):
        s3 = boto3.client("s3", endpoint_url=slow.url, region_name="us-east-1")
        bucket = f"src-{uuid.uuid4().hex[:10]}"
        sentences = seed(s3, bucket, n=n)
        uri, lake = lake_bucket(lake_server, tmp_path / "local")
        env = {
            "INGEST_DASK_ADDRESS": c.address,
            "INGEST_LAKE_ENDPOINT_URL": lake_server.url,
            "INGEST_S3_BATCH_SIZE": str(batch),
            "INGEST_S3_CONCURRENCY": "2",  # each batch takes a few round trips of 100 ms
        }
        args = ["s3", "--bucket", bucket, "--endpoint-url", slow.url, "--data-dir", uri]
        args += ["--task-runner", "dask", "--no-keep-files"]
        slow.reset_stats()
        proc = ingest_cli(args, tmp_path / "flow", env)
        deadline = time.monotonic() + 300
        # Poll the server's counter until a third of the objects are fetched and w1 holds
        # batches, then take w1 away without warning.
        held: list[str] = []
        while slow.stats().get("GET object", 0) < n // 3 or not held:
            assert proc.poll() is None and time.monotonic() < deadline, "run ended early"
            held = c.processing("w1")
            time.sleep(0.05)
        killed_at = time.time()
        c.kill("w1")
        finish(proc)
        assert c.worker_names() == {"w2"}
        gets = slow.stats().get("GET object", 0)

    objects = rows(lake, "SELECT key, status, count(*) OVER (PARTITION BY key) n FROM s3_objects")
    assert {r["key"] for r in objects} == set(sentences)
    assert all(r["status"] == "downloaded" and r["n"] == 1 for r in objects)
    docs = rows(lake, "SELECT key, text FROM documents WHERE status = 'ok'")
    assert {r["key"]: r["text"].strip() for r in docs} == sentences
    done = timings(lake, "fetch-batch")
    # Every batch ended on some worker: the ones w1 held when it died ran again on w2.
    assert len(done) >= n // batch
    assert {r["worker"] for r in done} <= {"w1", "w2"}
    assert all(r["worker"] == "w2" for r in done if r["started_at"].timestamp() > killed_at)
    print(
        f"w1 held {len(held)} tasks when killed; {gets} GETs for {n} objects; "
        f"{len(done)} fetch-batch runs for {n // batch} batches "
        f"({sum(r['worker'] == 'w1' for r in done)} on w1)"
    )
    assert gets >= n
