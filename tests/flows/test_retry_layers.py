"""One retry layer per failure kind, in real Prefect flow runs against real servers: a
listing page refused by S3 costs botocore's attempts only (no task retries on top), and
a batch whose rows cannot be written is not downloaded again."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from prefect import flow

from ingest import context
from ingest.records import Cursor, ObjectBatch, Shard
from ingest.s3.scan import ListSpec
from ingest.settings import Settings
from tasks.s3 import download_batch, list_objects
from tests.helpers import put_many
from tests.scripted_server import Answer, ScriptedServer

pytestmark = pytest.mark.flow


def test_a_refused_listing_page_costs_botocore_attempts_only(
    prefect_harness: None, tmp_path: Path
) -> None:
    """S3 answers every LIST with 503 SlowDown: botocore makes its attempts (the first and
    2 retries), the list-objects task is not retried on top of them (it was 4 task runs
    of 4 requests each)."""
    with ScriptedServer() as server:
        for path in ("/bkt", "/bkt/"):  # botocore's path and the fast listing's
            server.script(path, Answer(503, code="SlowDown"))
        settings = Settings(data_dir=tmp_path, s3={"endpoint_url": server.url, "max_attempts": 2})
        spec = ListSpec(run_id="listing-run", bucket="bkt")

        @flow
        def listing() -> Any:
            with context.opened(settings, spec.run_id):
                return list_objects(settings, spec, Shard(0), Cursor())

        state = listing(return_state=True)
        assert state.is_failed()
        assert "SlowDown" in str(state.result(raise_on_failure=False))
        botocore = [p for p, h in server.seen if "Boto3" in h.get("User-Agent", "")]
        assert botocore == ["/bkt"] * 3, server.seen  # the first request and 2 retries
        assert len(server.seen) == 4, server.seen  # and the fast path's one, once


def test_rows_that_cannot_be_written_do_not_download_the_batch_again(
    prefect_harness: None, s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    """The batch's staging folder cannot be made (a file holds its name): the write is tried
    again by itself, the task fails with the write's error, and each object was fetched
    once (it was three times: the task's two retries downloaded the whole batch again)."""
    objects = {f"doc-{i}.txt": f"body {i}".encode() for i in range(3)}
    put_many(s3, bucket, objects)
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    table = pa.Table.from_pylist(
        [
            {
                "bucket": bucket,
                "key": o["Key"],
                "etag": o["ETag"].strip('"'),
                "size": o["Size"],
                "last_modified": o["LastModified"].astimezone(UTC),
            }
            for o in listed
        ]
    )
    batch = ObjectBatch.from_table("batch-0", table)
    spec = ListSpec(run_id="write-fails", bucket=bucket)
    settings = Settings(data_dir=data_dir, s3={"endpoint_url": s3_server.url})
    blocked = data_dir / "staging" / "write-fails" / "s3_objects"
    blocked.parent.mkdir(parents=True)
    blocked.write_text("not a folder")

    @flow
    def downloading() -> Any:
        with context.opened(settings, spec.run_id):
            return download_batch(settings, spec, batch)

    s3_server.reset_stats()
    started = datetime.now(UTC)
    state = downloading(return_state=True)
    assert state.is_failed()
    assert isinstance(state.result(raise_on_failure=False), OSError)
    assert s3_server.stats()["GET object"] == len(objects)
    for key, body in objects.items():  # the downloads themselves are kept
        assert (data_dir / "objects" / bucket / key).read_bytes() == body
    assert datetime.now(UTC) >= started
