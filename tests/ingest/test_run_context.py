"""A run's context (``ingest.context``): its tasks use what the run opened, a client handed
in is the one the tasks use, and what the run opened is closed at its end; in real Prefect
flow runs against the development S3 server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from prefect import flow

from ingest import context, sync
from ingest.listing import ListSpec
from ingest.s3 import S3Connection
from ingest.settings import Settings
from tasks.s3 import check_bucket, download_batch
from tests.helpers import batch_of, put_many

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def test_a_connection_handed_in_is_the_one_the_tasks_use(
    s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    """The test's own connection (its request lanes counted) downloads the batch; the run's
    end closes what the run opened, not what it was given."""
    bodies = {f"doc-{i}.txt": f"body {i}".encode() for i in range(3)}
    put_many(s3, bucket, bodies)
    settings = Settings(data_dir=data_dir, s3_endpoint_url=s3_server.url)
    spec = ListSpec(run_id="given", bucket=bucket)
    batch = batch_of(bucket, s3.list_objects_v2(Bucket=bucket)["Contents"])
    given = S3Connection.open(settings)
    seen: list[str] = []

    @flow
    def downloading() -> Any:
        with context.opened(settings, spec.run_id, s3=given) as ctx:
            summary = download_batch(settings, spec, batch)
            seen.append("open" if "given" in context.open_runs() else "closed")
            assert ctx.s3 is given
            return summary

    summary = downloading()
    assert summary.counts == {"downloaded": len(bodies)}
    assert seen == ["open"] and "given" not in context.open_runs()
    for key, body in bodies.items():
        assert (data_dir / "objects" / bucket / key).read_bytes() == body
    # The given connection outlives the run: it is its giver's to close.
    again = sync.download_batch(given, settings, batch.objects(), prefix="", run_id="again")
    assert [r.status for r in again] == ["downloaded"] * len(bodies)
    given.close()


def test_a_task_without_its_runs_context_fails_saying_so(
    s3_server: Any, bucket: str, data_dir: Path
) -> None:
    settings = Settings(data_dir=data_dir, s3_endpoint_url=s3_server.url)

    @flow
    def checking() -> Any:
        return check_bucket(settings, "no-context", bucket)

    state = checking(return_state=True)
    assert state.is_failed()
    with pytest.raises(RuntimeError, match="no open context for run no-context"):
        state.result()


def test_closing_the_context_closes_its_pool_and_connection(data_dir: Path) -> None:
    with context.RunContext(Settings(data_dir=data_dir, extract_workers=1), "r") as ctx:
        pool, lanes = ctx.pool, ctx.s3.lanes
        assert pool.map("os:getpid", [()])[0].status == "ok"
        assert ctx.pool is pool and ctx.s3.lanes is lanes  # one of each for the run
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit("os:getpid")
    with pytest.raises(RuntimeError, match="shutdown"):
        lanes.pool.submit(print)
