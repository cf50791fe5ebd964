"""The ``rest-ingest`` flow: any paginated REST API declared in a source file.

One task fetches every resource of the source (parents, then their children)
through one client whose in-flight window adapts to the host, and stages one
table per resource; the run commits them at its end and publishes the summary.
A malformed page or a missing resource fails the run after the rest is stored;
rejected credentials fail it at once.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import Field

from flows.parameters import described
from ingest.rest.errors import RestTerminalError
from ingest.rest.records import RestSummary
from ingest.rest.source import load_source, source_path
from ingest.rest.summary import too_many_failed_pages
from ingest.settings import Settings
from tasks import limits
from tasks.rest import fetch_source, publish_summary
from tasks.runners import batch_runner, submit
from tasks.storage import maintain_lake, prepare_storage, publish_and_commit, run_staging

REST_TABLES = ("api_requests", "api_windows", "rest_syncs")


class TooManyFailedPagesError(RestTerminalError):
    """More pages failed after their retries than ``max_failed_ratio`` allows."""


@flow(
    name="rest-ingest",
    timeout_seconds=limits.FLOW_SECONDS,
    description="Fetch every resource of a REST API declared in a source file (YAML), "
    "concurrently within the limits the server shows and incrementally, into Delta tables "
    "and DuckDB views (one table per resource).",
    validate_parameters=True,
)
@described
def rest_ingest(
    source: Annotated[
        str,
        Field(
            description="Source file (YAML): a path, or one relative to the project such as "
            "sources/tickets.yaml.",
            min_length=1,
        ),
    ],
    base_url: Annotated[
        str | None, Field(description="API root instead of the file's client.base_url.")
    ] = None,
    concurrency: Annotated[
        int | None,
        Field(
            description="Most requests in flight (the client finds what the server allows up "
            "to this). Empty: the file's client.concurrency.",
            ge=1,
            le=256,
        ),
    ] = None,
    data_dir: Annotated[
        str | None, Field(description="Folder for the tables and warehouse.duckdb.")
    ] = None,
    full_refresh: Annotated[
        bool, Field(description="Fetch everything again, ignoring stored watermarks.")
    ] = False,
    task_runner: Annotated[
        Literal["thread", "dask"],
        Field(
            description="Where the fetch task runs: thread (this process) or dask (the cluster "
            "at INGEST_DASK_ADDRESS, else a LocalCluster). The ingest command's default: "
            "INGEST_TASK_RUNNER."
        ),
    ] = "thread",
) -> RestSummary:
    started = time.perf_counter()
    settings = Settings()
    settings = settings.with_data_dir(data_dir)
    settings = settings.model_copy(update={"task_runner": task_runner})
    path = source_path(source)
    declared = load_source(path)  # a clear error, with the line, before anything runs
    run_id = str(flow_run.id or "local")
    tables = [declared.table(r) for r in declared.resources]

    with run_staging(settings, run_id), batch_runner(settings) as runner:
        prepare_storage(settings, run_id)
        summary = submit(
            runner,
            fetch_source,
            settings=settings,
            source_file=str(path),
            run_id=run_id,
            base_url=base_url,
            concurrency=concurrency,
            full_refresh=full_refresh,
        ).result()
        maintain_lake(settings, [*tables, *REST_TABLES])
        summary.seconds = time.perf_counter() - started
        summary = publish_and_commit(
            settings,
            run_id,
            lambda: publish_summary(settings, summary, f"rest-ingest ({declared.name})"),
        )

    if summary.stopped:
        get_run_logger().warning("stopped early, the next run resumes: %s", summary.stopped)
    if summary.errors:
        resource, error = summary.errors[0]
        raise RestTerminalError(
            f"{len(summary.errors)} listing(s) of {declared.name} failed; first: "
            f"{resource}: {error}"
        )
    pages = sum(r["pages"] for r in summary.resources)
    failed = too_many_failed_pages(summary.failed_pages, pages, settings.max_failed_ratio, run_id)
    if failed:
        raise TooManyFailedPagesError(failed)
    return summary
