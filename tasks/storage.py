"""Storage tasks: prepare the lake before a run, maintain it, commit the run's rows."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeVar

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run

from ingest import storage
from ingest.context import lake_of
from ingest.records import TaskTiming
from ingest.settings import Settings
from ingest.storage import maintenance
from ingest.storage.location import LakeLocation
from tasks.artifacts import beside
from tasks.timing import timed

T = TypeVar("T")

# A run's own history: what its summary reads (and adds its flow-run row to) while the
# rest of its rows commit.
RUN_HISTORY = ("task_timings", "flow_runs")


@task(name="prepare-storage", cache_policy=NO_CACHE)
def prepare_storage(settings: Settings, run_id: str) -> list[str]:
    """Migrate an old data folder once; commit what runs that died had staged."""
    lake = lake_of(settings, run_id)
    with timed(lake, noun="runs recovered") as t:
        recovered = storage.prepare(
            lake, current_run=run_id, stale_after=settings.staging_stale_after
        )
        t.items = len(recovered)
    if recovered:
        get_run_logger().warning(
            "committed the staged rows of %d run(s) that died: %s",
            len(recovered),
            ", ".join(recovered),
        )
    return recovered


@task(name="maintain-lake", cache_policy=NO_CACHE)
def maintain_lake(
    settings: Settings, tables: list[str], run_id: str = ""
) -> storage.MaintenanceReport:
    """Retention, compaction past the file threshold, vacuum."""
    lake = lake_of(settings, run_id)
    with timed(lake, noun="files") as t:
        report = storage.maintain(
            lake,
            tables=[x for x in tables if maintenance.newest_version(lake, x) is not None],
            retention_days=settings.retention_days,
            compact_min_files=settings.compact_min_files,
            vacuum_retention_hours=settings.vacuum_retention_hours,
        )
        t.items = report.changed
    return report


def start_upkeep(
    settings: Settings, tables: list[str], run_id: str = ""
) -> PrefectFuture[storage.MaintenanceReport] | None:
    """``maintain-lake`` submitted over the tables of ``tables`` whose upkeep is due
    (``maintenance.due``: by one listing of each log), to run beside what follows; None,
    and no task run, when none is."""
    due = maintenance.due(lake_of(settings, run_id), tables)
    return maintain_lake.submit(settings, due, run_id) if due else None


@task(
    name="commit-rows",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[2, 10],
)
def commit_rows(settings: Settings, run_id: str) -> storage.CommitReport:
    """Commit the run's staged rows but its own history (one commit per table). Their
    views follow with the history's (``commit_run``): warehouse.duckdb is opened once a
    run, not twice (an opening and its closing checkpoint cost ~50-100 ms)."""
    lake = lake_of(settings, run_id)
    with timed(lake, noun="rows") as t:
        report = storage.commit_run(lake, run_id, exclude=RUN_HISTORY)
        t.items = sum(report.rows.values())
    return report


@task(
    name="commit-run",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=[2, 10],
)
def commit_run(
    settings: Settings, run_id: str, committed: storage.CommitReport | None = None
) -> storage.CommitReport:
    """Commit what the run still has staged (one commit per table; with ``committed``,
    what ``commit-rows`` left: the run's own history), then refresh warehouse.duckdb's
    views of every table the run wrote (``committed``'s too)."""
    started = datetime.now(UTC)
    t0 = time.perf_counter()
    lake = lake_of(settings, run_id)
    report = storage.commit_run(lake, run_id, exclude=("task_timings",))
    timing = TaskTiming(
        flow_run_id=run_id,
        flow_name=str(flow_run.flow_name or ""),
        task_name="commit-run",
        task_run_id="commit",
        started_at=started,
        ended_at=datetime.now(UTC),
        seconds=time.perf_counter() - t0,
        items=sum(report.rows.values()),
    )
    storage.stage(lake, run_id, "task_timings", "commit-run", [timing.as_row()])
    last = storage.commit_run(lake, run_id)
    report.rows.update(last.rows)
    if committed is not None:
        report.rows.update(committed.rows)
    report.warehouse_refreshed = refresh_views(lake, report.rows)
    # The line gives the figure its task_timings row holds (the stage table's), and then
    # what came after it was measured: its own row's commit and the views.
    logger = get_run_logger()
    logger.info("commit-run %s rows in %.2f s", timing.items, timing.seconds)
    logger.info(
        "commit-run wrote %s; then its timing row and the warehouse views took %.2f s",
        ", ".join(f"{k} {v}" for k, v in sorted(report.rows.items())) or "nothing new",
        time.perf_counter() - t0 - timing.seconds,
    )
    return report


def refresh_views(lake: LakeLocation, tables: dict[str, int]) -> bool:
    """Bring warehouse.duckdb's views of ``tables`` to their new versions; False (and a
    warning) when another process holds the file."""
    if storage.refresh_warehouse(lake, tables=tables):
        return True
    get_run_logger().warning(
        "warehouse.duckdb not refreshed: another process holds it open read-write (the "
        "duckdb CLI opens files read-write unless started with -readonly). Every row is "
        "stored in the lake and `ingest query` answers from it now; close that session "
        "and the next run brings the file's views up to date."
    )
    return False


def publish_and_commit(settings: Settings, run_id: str, publish: Callable[[], T]) -> T:
    """A run's end: its rows commit (``commit-rows``, on the flow's task runner) while
    ``publish`` builds its summary, which reads only the run's own history; then that
    history commits and the warehouse views follow (``commit-run``), while the summary's
    artifacts are still being stored (``tasks.artifacts.beside``). A run that staged
    nothing but its history (nothing new, nothing gone) has no ``commit-rows``: a task
    run that would commit nothing."""
    with beside():
        return _publish_and_commit(settings, run_id, publish)


def _publish_and_commit(settings: Settings, run_id: str, publish: Callable[[], T]) -> T:
    if not rows_staged(settings, run_id):
        published = publish()
        commit_run(settings, run_id)
        return published
    committing = commit_rows.submit(settings, run_id)
    try:
        published = publish()
    finally:
        committing.wait()  # never leave a commit running behind a failed summary
    committed = committing.result()
    try:
        commit_run(settings, run_id, committed)
    except Exception:
        if committed.rows:  # the rows are in the lake: their views follow them anyway
            refresh_views(lake_of(settings, run_id), committed.rows)
        raise
    return published


def rows_staged(settings: Settings, run_id: str) -> bool:
    """Whether the run has staged rows of a table other than its own history."""
    return any(
        t not in RUN_HISTORY
        for t in storage.staging.staged_tables(lake_of(settings, run_id), run_id)
    )


@contextmanager
def hold_target(settings: Settings, target: str, run_id: str) -> Iterator[str | None]:
    """The run's lease on what it reads (``ingest.storage.leases``) for the block: None
    when this run holds it (or ``s3_same_target`` is ``run``); with ``skip``, the message
    the run ends with when another live run holds it. ``wait`` says once, in the run's
    log, whom it waits for."""
    from ingest.storage import leases

    def waiting(other: leases.Holder) -> None:
        get_run_logger().warning(
            "waiting: %s; this run goes on when it ends (INGEST_S3_SAME_TARGET=skip skips instead)",
            other.describe(),
        )

    with leases.hold(
        lake_of(settings, run_id),
        target,
        run_id,
        when_held=settings.s3.same_target,
        stale_after=settings.staging_stale_after,
        on_wait=waiting,
    ) as other:
        if other is None:
            yield None
            return
        message = f"skipped: {other.describe()} (INGEST_S3_SAME_TARGET=skip)"
        get_run_logger().warning("%s", message)
        yield message


@contextmanager
def run_staging(settings: Settings, run_id: str) -> Iterator[None]:
    """The run's staging for the block: marked alive (no other run commits it), and on
    the way out, whether the block succeeded or raised, whatever is still staged is
    committed (a failed run keeps every row it fetched) and the folder removed."""
    lake = lake_of(settings, run_id)
    storage.location.check(lake)  # an s3:// lake out of reach: one clear error first
    try:
        with storage.heartbeat(lake, run_id):
            yield
    finally:
        storage.finish_run(lake, run_id)
