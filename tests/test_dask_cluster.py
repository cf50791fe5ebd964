"""s3-ingest on a real Dask cluster: ``dask scheduler`` and two ``dask worker``
processes, each in a folder of its own with no file shared with the others or with
the flow (as separate machines), a moto S3 server process, and a Prefect server.

The short scenario runs in ``make test``; the long ones (the ``ingest`` command
from three folders, downloads to object storage, a worker killed mid-run) carry
the ``cluster`` marker: ``make test-cluster``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from devservers.dask_cluster import DaskCluster
from devservers.s3 import DevServer
from tests.helpers import put_many, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

TEXT_KEYS = 24  # text files, each with a sentence naming its key


def api_url() -> str:
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the Prefect test harness sets an API"
    return str(url)


def seed(s3: Any, bucket: str, n: int = TEXT_KEYS, prefix: str = "docs/") -> dict[str, str]:
    """``n`` small text objects; returns key -> the sentence inside it."""
    s3.create_bucket(Bucket=bucket)
    sentences = {f"{prefix}{i:03d}/note-{i:03d}.txt": f"drawing note number {i:03d}" for i in range(n)}
    put_many(s3, bucket, {k: v.encode() for k, v in sentences.items()})
    return sentences


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory, prefect_harness: None) -> Iterator[DaskCluster]:
    root = tmp_path_factory.mktemp("cluster")
    with DaskCluster(root, workers=2, env={"PREFECT_API_URL": api_url()}) as c:
        yield c


def test_batches_spread_over_two_workers_and_a_rerun_gets_nothing(
    s3: Any, s3_server: DevServer, cluster: DaskCluster, tmp_path: Path, monkeypatch: Any
) -> None:
    from flows.s3_ingest import s3_ingest

    bucket = f"src-{uuid.uuid4().hex[:10]}"
    sentences = seed(s3, bucket)
    lake = tmp_path / "lake"
    monkeypatch.setenv("INGEST_DASK_ADDRESS", cluster.address)
    monkeypatch.setenv("INGEST_S3_BATCH_SIZE", "3")  # 8 batches for 2 workers x 2 threads

    def run() -> Any:
        return s3_ingest(
            bucket=bucket,
            endpoint_url=s3_server.url,
            data_dir=str(lake),
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
        lake, "SELECT worker, count(*) n FROM task_timings WHERE task_name = 'fetch-batch' GROUP BY ALL"
    )
    assert {r["worker"] for r in workers} == {"w1", "w2"}, workers
    assert sum(r["n"] for r in workers) == 8
    # The listing and the commit stayed in the flow's process, never on a worker.
    others = rows(lake, "SELECT DISTINCT worker FROM task_timings WHERE task_name = 'list-objects'")
    assert others and not {r["worker"] for r in others} & {"w1", "w2"}
    # No worker left a file in its folder (the downloads were dropped after extraction).
    for name in cluster.names:
        assert not [p for p in (cluster.folder(name) / "tmp").rglob("*") if p.is_file()]

    s3_server.reset_stats()
    second = run()
    assert second.counts == {"skipped": TEXT_KEYS}
    assert s3_server.stats().get("GET object", 0) == 0
