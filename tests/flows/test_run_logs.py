"""The library's log lines reach the Prefect UI: stored by the API with their flow run."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import (
    FlowRunFilter,
    FlowRunFilterParentFlowRunId,
    LogFilter,
    LogFilterFlowRunId,
)
from prefect.logging.handlers import APILogHandler

import flows  # noqa: F401  (attaches the handler, as every process running a flow does)
from ingest import context
from ingest.s3.scan import ListSpec
from ingest.settings import Settings
from tasks.s3 import download_batch
from tests.helpers import batch_of

pytestmark = pytest.mark.flow


async def stored_logs(flow_run_id: Any) -> list[tuple[str, int, str]]:
    async with get_client() as client:
        logs = await client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[flow_run_id]))
        )
    return [(log.name, log.level, log.message) for log in logs]


def test_per_object_failures_are_stored_with_the_run(
    prefect_harness: None, s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    """An object deleted between listing and GET is a failed row; the library's warning
    about it is among the run's logs in the API, under its ``ingest.*`` logger name."""
    s3.put_object(Bucket=bucket, Key="kept.txt", Body=b"kept")
    s3.put_object(Bucket=bucket, Key="gone.txt", Body=b"gone")
    listed = s3.list_objects_v2(Bucket=bucket)["Contents"]
    s3.delete_object(Bucket=bucket, Key="gone.txt")
    batch = batch_of(bucket, listed)
    settings = Settings(data_dir=data_dir, s3={"endpoint_url": s3_server.url, "max_attempts": 1})

    @flow
    def downloading() -> Any:
        logging.getLogger("ingest.test").warning("outside a task, inside the flow")
        logging.getLogger("ingest.test").info("an INFO line stays local")
        with context.opened(settings, "logs"):
            return download_batch(settings, ListSpec(run_id="logs", bucket=bucket), batch)

    state = downloading(return_state=True)
    summary = state.result()
    assert summary.counts == {"downloaded": 1, "failed": 1}
    APILogHandler().flush()  # blocks until the queued records are sent
    logs = asyncio.run(stored_logs(state.state_details.flow_run_id))
    failures = [(n, lvl, m) for n, lvl, m in logs if "gone.txt failed" in m]
    assert len(failures) == 1, logs
    name, level, message = failures[0]
    assert name == "ingest.s3.sync" and level == logging.WARNING
    assert "NoSuchKey" in message or "404" in message
    assert ("ingest.test", logging.WARNING, "outside a task, inside the flow") in logs
    assert not [m for _, _, m in logs if m == "an INFO line stays local"]


def test_lines_outside_any_run_stay_local(caplog: pytest.LogCaptureFixture) -> None:
    """A library line with no run (a plain script, a pool thread) is not an error."""
    with caplog.at_level(logging.WARNING):
        logging.getLogger("ingest.test").warning("no run here")
    assert "without a flow run id" not in caplog.text


def test_a_failure_has_one_traceback_in_the_run_logs(prefect_harness: None) -> None:
    """A task failing in a child flow called by a task of a parent flow (a nightly's
    child): Prefect's engine logs the failure at each of the four levels; the API holds
    one traceback, on the failed task's line, and every level's line still names the
    cause."""
    from prefect import task

    @task(name="breaks")
    def breaks() -> None:
        raise ValueError("the cause, said once")

    @flow(name="child-of-failure")
    def child() -> None:
        breaks()

    @task(name="run-child")
    def run_child() -> None:
        child()

    @flow(name="parent-of-failure")
    def parent() -> None:
        run_child()

    state = parent(return_state=True)
    assert state.is_failed()
    APILogHandler().flush()
    parent_id = state.state_details.flow_run_id

    async def failure_logs() -> list[Any]:
        async with get_client() as client:
            [kid] = await client.read_flow_runs(
                flow_run_filter=FlowRunFilter(
                    parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=[parent_id])
                )
            )
            logs = await client.read_logs(
                log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[parent_id, kid.id]))
            )
        return [log for log in logs if log.level >= logging.ERROR]

    errors = asyncio.run(failure_logs())
    with_traceback = [e for e in errors if "Traceback (most recent call last)" in e.message]
    assert len(with_traceback) == 1, [e.message for e in errors]
    [first] = with_traceback
    assert first.name == "prefect.task_runs" and first.message.startswith("Task run failed")
    assert "ValueError: the cause, said once" in first.message
    starts = ("Task run failed with exception", "Encountered exception during execution")
    raised = [e for e in errors if e.message.startswith(starts)]
    assert len(raised) == 4, [e.message for e in errors]  # each level's own line is kept
    assert all("the cause, said once" in e.message for e in errors), [e.message for e in errors]
