"""Helpers shared by the S3 tests."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ingest import storage

ROOT = Path(__file__).resolve().parents[1]


def harness_api_url() -> str:
    """The API of the session's Prefect test server (``prefect_harness``), for the
    processes and workers a test starts."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value()
    assert url, "the Prefect test harness sets an API"
    return str(url)


def body_for(key: str, size: int | None = None) -> bytes:
    """Deterministic content for a key (different keys, different bytes)."""
    seed = hashlib.sha256(key.encode()).digest()
    n = size if size is not None else 100 + seed[0] * 7
    return (seed * (n // len(seed) + 1))[:n]


def put_many(s3: Any, bucket: str, objects: dict[str, bytes]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(
            pool.map(
                lambda kv: s3.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]), objects.items()
            )
        )


def rows(data_dir: Path, sql: str) -> list[dict[str, Any]]:
    columns, values = storage.query(data_dir, sql)
    return [dict(zip(columns, v, strict=True)) for v in values]


def run_cli(args: list[str], env: dict[str, str] | None = None, **kw: Any) -> subprocess.Popen[str]:
    """Start ``ingest ...`` in a child process (its own Python, like a user's shell)."""
    return subprocess.Popen(
        [sys.executable, "-m", "cli.main", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


def files_under(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def write_rows(data_dir: Path, table: str, run_id: str, part: str, rows: list[dict]) -> None:
    """Stage ``rows`` as a run would and commit them to the lake."""
    from ingest import storage

    storage.stage(data_dir, run_id, table, part, rows)
    storage.commit_run(data_dir, run_id)


def batch_of(bucket: str, listed: list[dict[str, Any]]) -> Any:
    """One batch (``batch-0``) of the objects of a boto3 ``list_objects_v2`` answer's
    ``Contents``, as the listing would hand it to a download task."""
    import pyarrow as pa

    from ingest.records import ObjectBatch

    rows = [
        {
            "bucket": bucket,
            "key": o["Key"],
            "etag": o["ETag"].strip('"'),
            "size": o["Size"],
            "last_modified": o["LastModified"],
        }
        for o in listed
    ]
    return ObjectBatch.from_table("batch-0", pa.Table.from_pylist(rows))
