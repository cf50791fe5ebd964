"""The ``rest-ingest`` flow: any paginated REST API declared in a source file.

One task fetches every resource of the source (parents, then their children)
through one client whose in-flight window adapts to the host, and stages one
table per resource; the run commits them at its end and publishes the summary
(artifacts and the run's ``flow_runs`` row). A malformed page or a missing
resource fails the run after the rest is stored; rejected credentials fail it at
once. ``ingest_source`` is that composition, which the ``github-pulls`` flow runs
too, for the source it builds from its parameters. What the run holds open (its lake
session: the lake's credentials and client, the database for small queries) is its
context's (``ingest.context``), opened first and closed last; its tasks find it by the
run's id.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated

from prefect import flow, get_run_logger
from prefect.runtime import flow_run
from pydantic import Field

from flows.parameters import INGEST_FLOW, FetchRunner, flow_body, run_form
from ingest.rest.errors import RestTerminalError
from ingest.rest.records import RestSummary
from ingest.rest.source import Source
from ingest.rest.summary import too_many_failed_pages
from tasks.report import publish_summary
from tasks.rest import fetch_all, tables_of
from tasks.runs import opened_run, rest_run
from tasks.storage import prepare_storage, publish_and_commit, start_upkeep
from tasks.timing import running_seconds

if TYPE_CHECKING:
    from ingest.settings import Settings
    from ingest.storage.location import LakeSession


class TooManyFailedPagesError(RestTerminalError):
    """More pages failed after their retries than ``max_failed_ratio`` allows."""


@run_form
@flow(
    name="rest-ingest",
    **INGEST_FLOW,
    description="Fetch every resource of a REST API declared in a source file (YAML), "
    "concurrently within the limits the server shows and incrementally, into Delta tables "
    "and DuckDB views (one table per resource).",
)
@flow_body
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
    task_runner: FetchRunner = "thread",
) -> RestSummary:
    started = time.perf_counter()
    settings, declared = rest_run(
        source,
        base_url=base_url,
        concurrency=concurrency,
        data_dir=data_dir,
        task_runner=task_runner,
    )
    return ingest_source(
        settings,
        declared,
        run_id=str(flow_run.id or "local"),
        started=started,
        base_url=base_url,
        full_refresh=full_refresh,
        title=f"rest-ingest ({declared.name})",
    )


def ingest_source(
    settings: Settings,
    source: Source,
    *,
    run_id: str,
    started: float,
    base_url: str | None = None,
    full_refresh: bool = False,
    title: str,
    lake: LakeSession | None = None,
) -> RestSummary:
    """The composition of every REST flow (rest-ingest, github-pulls): the lake's upkeep
    beside the fetch (which waits on the network; nothing of the run is committed before
    it ends, and the stored state is read as it was), the commit, the summary, and the
    run's failure when listings failed. A GitHub source loads its stored state first and,
    on Dask, is fetched by one task per repository. ``lake``: a session handed in (a
    test's), used and left open."""
    with opened_run(settings, run_id, lake=lake) as run:
        settings = run.ctx.settings
        prepare_storage(settings, run_id)
        upkeep = start_upkeep(settings, tables_of(source), run_id)
        summary = fetch_all(
            run.runner,
            settings,
            source,
            run_id=run_id,
            base_url=base_url,
            full_refresh=full_refresh,
        )
        if upkeep is not None:  # none was due
            upkeep.result()
        summary.seconds = running_seconds(time.perf_counter() - started)
        summary = publish_and_commit(
            settings, run_id, lambda: publish_summary(settings, summary, title)
        )

    if summary.stopped:
        get_run_logger().warning(
            "incomplete (a listing that stopped keeps its watermark for the next run): %s",
            summary.stopped,
        )
    if summary.errors:
        where, error = summary.errors[0]
        raise RestTerminalError(
            f"{len(summary.errors)} of {len(summary.listings)} listings of {source.name} "
            f"failed; first: {where}: {error}"
        )
    failed = too_many_failed_pages(
        summary.failed_pages, summary.pages, settings.max_failed_ratio, run_id
    )
    if failed:
        raise TooManyFailedPagesError(failed)
    return summary
