"""Failures no retry fixes, over real runs (Prefect test server, the S3 server on
loopback): a permanent failure is counted on the run that met it, not again on every
run against INGEST_MAX_FAILED_RATIO; an archived object is named as archived, with
what to do, not as a failure the next run retries."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.helpers import put_many

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def run(bucket: str, s3_server: Any, data_dir: Path) -> Any:
    from flows.s3_ingest import s3_ingest

    return s3_ingest(
        bucket=bucket,
        prefix="in/",
        endpoint_url=s3_server.url,
        data_dir=str(data_dir),
        extract=False,
        return_state=True,
    )


def test_a_permanent_failure_counts_once_and_an_archived_object_is_named(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.flows.test_nightly_ops import artifacts

    monkeypatch.setenv("INGEST_MAX_FAILED_RATIO", "0.15")
    fine = {f"in/fine-{i}.txt": b"fine" for i in range(9)}
    put_many(s3, bucket, {"in/../escape-1.txt": b"evil"} | fine)  # 1 of 10 failed: 10 %
    first = run(bucket, s3_server, data_dir)
    assert first.is_completed(), first
    assert first.result().counts == {"downloaded": 9, "failed": 1}

    # A second unsafe key: with the first one counted again, 2 of 11 (18 %) would fail
    # the run; the first failed for good and did not change, so 1 of 11 failed tonight.
    put_many(s3, bucket, {"in/../escape-2.txt": b"evil"})
    second = run(bucket, s3_server, data_dir)
    assert second.is_completed(), second
    counts = second.result().counts
    assert counts == {"skipped": 9, "failed": 1, "failed before": 1}, counts
    summary = artifacts(second.state_details.flow_run_id)["run-summary"].data
    assert "**1 unchanged objects failed for good on an earlier run**" in summary
    assert "`in/../escape-2.txt`" in summary and "`in/../escape-1.txt`" not in summary

    # An object in an archive storage class: named as archived, with what to do.
    s3.put_object(Bucket=bucket, Key="in/cold.txt", Body=b"cold", StorageClass="GLACIER")
    third = run(bucket, s3_server, data_dir)
    message = third.message or ""
    assert "1 archived: restore them, then the next run fetches them" in message, message
    assert "retried by the next run" not in message
    summary = artifacts(third.state_details.flow_run_id)["run-summary"].data
    [row] = [line for line in summary.splitlines() if "`in/cold.txt`" in line]
    assert "InvalidObjectState" in row and "archived (S3 Glacier or Deep Archive)" in row
    assert "restore-object" in row and "the next run retries it" not in row
