"""Prefect glue for ``ingest.timing``: ids come from the running task."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from uuid import UUID

from prefect import get_run_logger
from prefect.client.orchestration import get_client
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


def task_run_seconds(flow_run_id: object, wait: float = 0.0) -> dict[str, float]:
    """Per task name, the sum of the flow run's task runs' time in Running as the server
    records it (each task run's ``total_run_time``, the figure its UI shows): a stage's
    duration by the same rule as a run's. Empty without a server.

    Task run states reach the server as events, written by its recorder in batches: with
    ``wait``, this process's events are sent first and the server is asked again (for at
    most ``wait`` seconds) until every task run it lists has its final state."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    if wait:
        from prefect.events.worker import EventsWorker

        try:  # a worker that never started has nothing to send
            EventsWorker.drain_all(timeout=wait)
        except Exception as exc:
            get_run_logger().debug("events not drained: %s", exc)
    deadline = time.monotonic() + wait
    try:
        with get_client(sync_client=True) as client:
            while True:
                runs, offset = [], 0
                while True:
                    page = client.read_task_runs(
                        flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])),
                        limit=200,
                        offset=offset,
                    )
                    runs += page
                    if len(page) < 200:
                        break
                    offset += 200
                final = all(t.state is not None and t.state.is_final() for t in runs)
                if final or time.monotonic() >= deadline:
                    break
                time.sleep(0.2)  # the recorder's next batch
    except Exception:  # no API (a run without a server): the stage tables' own figures
        return {}
    totals: dict[str, float] = {}
    for t in runs:
        name = t.name.rsplit("-", 1)[0]  # "download-batch-3f2": its task's name
        totals[name] = totals.get(name, 0.0) + t.total_run_time.total_seconds()
    return totals


def add_task_run_seconds(
    stages: list[dict[str, Any]], flow_run_id: object, label: str = "", wait: float = 0.0
) -> None:
    """Give each stage row of ``flow_run_id`` (named ``label: stage`` with a label) its
    ``run_seconds``: the sum of its task runs' figures, as the Prefect UI shows them
    (``wait``: see ``task_run_seconds``)."""
    apply_run_seconds(stages, task_run_seconds(flow_run_id, wait), label)


def apply_run_seconds(
    stages: list[dict[str, Any]], totals: dict[str, float], label: str = ""
) -> None:
    """``add_task_run_seconds`` with the figures read already (``task_run_seconds``)."""
    prefix = f"{label}: " if label else ""
    for s in stages:
        name = str(s["stage"])
        if name.startswith(prefix) and name[len(prefix) :] in totals:
            s["run_seconds"] = round(totals[name[len(prefix) :]], 3)
