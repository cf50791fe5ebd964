"""Prefect glue for ``ingest.timing``: ids come from the running task."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from prefect import get_run_logger
from prefect.runtime import flow_run, task_run

from ingest import timing
from ingest.records import TaskTiming
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
