"""Prefect glue for ``ingest.report.timing``: ids come from the running task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run, task_run

from ingest.records import TaskTiming
from ingest.report import timing
from ingest.storage.location import DataDir
from tasks.runners import worker_name


@contextmanager
def timed(data_dir: DataDir, noun: str = "objects") -> Iterator[TaskTiming]:
    """Record the current task attempt in ``task_timings`` and log one line."""
    with timing.record(
        data_dir,
        flow_run_id=str(flow_run.id or "local"),
        flow_name=str(flow_run.flow_name or ""),
        task_run_id=str(task_run.id or "local"),
        task_name=str(task_run.task_name or "task"),
        attempt=int(task_run.run_count or 1),
        noun=noun,
        logger=get_run_logger(),  # type: ignore[arg-type]
        worker=worker_name(),
    ) as t:
        yield t


def running_seconds(fallback: float, flow_run_id: Any = None) -> float:
    """A flow run's time in Running by Prefect's rule, the figure its UI shows: the
    server's ``total_run_time`` plus the Running interval under way (``estimated_run_time``),
    so a summary written before the run ends gives the figure up to that moment. The
    current run by default; ``fallback`` (the time measured here) without a server."""
    run_id = flow_run_id or flow_run.id
    if not run_id:
        return fallback
    try:
        with get_client(sync_client=True) as client:
            recorded = client.read_flow_run(UUID(str(run_id))).estimated_run_time.total_seconds()
    except Exception:  # no API (a run without a server): the time measured here
        return fallback
    return recorded or fallback


def prefect_interval(flow_run_id: Any) -> tuple[datetime, datetime] | None:
    """An ended flow run's ``start_time`` and ``end_time`` as the server recorded them, the
    interval its UI shows; None without a server or for a run that never started."""
    try:
        with get_client(sync_client=True) as client:
            run = client.read_flow_run(UUID(str(flow_run_id)))
    except Exception:  # no API (a run without a server)
        return None
    if run.start_time is None or run.end_time is None:
        return None
    return run.start_time, run.end_time
