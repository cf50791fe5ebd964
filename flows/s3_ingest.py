"""The ``s3-ingest`` flow: list a bucket, download new and changed objects.

The listing runs as ``list-objects`` tasks, one chunk (a few pages) at a time
per key-range shard; each chunk compares its key range with the stored state
and hands back only what changed, as batches, which download (and extract) on
the task runner while the next chunk is listed. Task parameters are a batch
at most, never the bucket. Each batch is one task run; the requests of all
batches share one pool sized for latency (``concurrency``), not for cores.
The run's rows are staged as batches finish and committed to the lake at the
end, one commit per table.

Where each task runs (``task_runner``, see ``tasks.runners``): the batch tasks
(``fetch-batch``, ``extract-stored``) go to the chosen runner, threads of this
process (a pool of their own, so the listing never queues behind them) or a Dask
cluster. On threads, the flow hands out batches as they finish, a few ahead: the
listing runs just ahead of the downloads instead of holding the bucket's batches in
memory. On a cluster a batch is one ``fetch-batch``: download and extraction of an
object happen in one task on one worker, so no local path crosses machines.
Everything else stays in the flow's process on its own threads: ``list-objects`` and
``find-changes`` share the run's listing database (an in-process DuckDB,
``ingest.s3.changes.ListingDatabase``, fed chunk by chunk, closed when the listing is
compared), a worker would have neither; the listing is a few requests per thousand keys, cheap
next to the batches; and the checks, the summary and the one commit per table belong
to the run, not to a batch.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from prefect import flow
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.parameters import INGEST_FLOW, flow_body, run_form
from ingest.errors import IngestError
from ingest.report.summary import RunSummary, too_many_failures
from tasks.report import finish, publish_summary
from tasks.runs import list_spec, opened_run, run_batches, run_settings
from tasks.s3 import check_bucket
from tasks.storage import prepare_storage, publish_and_commit, start_upkeep
from tasks.timing import running_seconds

# The tables this flow writes, which its runs keep trimmed and compacted.
S3_TABLES = (
    "s3_objects",
    "s3_object_log",
    "documents",
    "document_log",
    "document_pages",
    "document_chunks",
    "dxf_attributes",
    "dxf_drawings",
    "task_timings",
    "flow_runs",
)


# Threads of the batch tasks (the thread runner): a download batch mostly waits for its
# requests on the shared lanes; eight keep ``s3_concurrency`` requests queued.
BATCH_THREADS = 8
# Batches handed out and not yet folded into the summary (running or queued).
BATCHES_AHEAD = 2 * BATCH_THREADS


class TooManyFailuresError(IngestError):
    """More objects failed than ``max_failed_ratio`` allows."""


@run_form
@flow(
    name="s3-ingest",
    **INGEST_FLOW,
    description="Download new and changed objects of an S3 bucket/prefix into data_dir "
    "and record one row per object in Parquet and DuckDB.",
    # ignore: TaskRunner is invariant in its future type, so no runner instance fits
    # the decorator's annotation (PrefectHQ/prefect#16938).
    task_runner=ThreadPoolTaskRunner(max_workers=8),  # type: ignore[arg-type]
)
@flow_body
def s3_ingest(
    bucket: Annotated[str, Field(description="Bucket to ingest.", min_length=3, max_length=63)],
    prefix: Annotated[str, Field(description="Only keys under this prefix.")] = "",
    endpoint_url: Annotated[
        str | None,
        Field(description="S3-compatible endpoint (MinIO, Ceph, moto). Empty means AWS."),
    ] = None,
    include: Annotated[
        list[str] | None,
        Field(description="Glob patterns on the key below the prefix; keep keys matching any."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        Field(description="Glob patterns on the key below the prefix; drop keys matching any."),
    ] = None,
    concurrency: Annotated[
        int | None,
        Field(description="Requests in flight (sized for latency, not cores).", ge=1, le=512),
    ] = None,
    data_dir: Annotated[
        str | None,
        Field(
            description="Folder for the tables, warehouse.duckdb and objects, or "
            "s3://bucket/prefix for a lake on object storage."
        ),
    ] = None,
    download_dir: Annotated[
        str | None, Field(description="Objects land at DIR/<key below prefix>.")
    ] = None,
    full_refresh: Annotated[
        bool, Field(description="Download everything again, ignoring the manifest.")
    ] = False,
    extract: Annotated[
        bool,
        Field(description="Extract the text of new and changed objects into `documents`."),
    ] = True,
    list_shards: Annotated[
        int | None,
        Field(
            description="Key-range shards listed concurrently, for very large buckets.",
            ge=1,
            le=256,
        ),
    ] = None,
    listing: Annotated[
        Literal["list", "inventory"],
        Field(description="Where the listing comes from: LIST calls, or an S3 Inventory report."),
    ] = "list",
    inventory: Annotated[
        str | None,
        Field(
            description="With listing=inventory: s3://dest-bucket/prefix/source-bucket/config-id/ "
            "(the newest report is used) or the s3://.../manifest.json of one report."
        ),
    ] = None,
    keep_files: Annotated[
        bool,
        Field(
            description="Keep the downloaded objects at the download destination; false drops "
            "each file once its text is extracted."
        ),
    ] = True,
    task_runner: Annotated[
        Literal["thread", "dask"],
        Field(
            description="Where the batches run: thread (this process) or dask (the cluster "
            "at INGEST_DASK_ADDRESS, else a LocalCluster). The ingest command's default: "
            "INGEST_TASK_RUNNER."
        ),
    ] = "thread",
    reextract_kinds: Annotated[
        list[str] | None,
        Field(
            description="Only documents of these kinds (pdf, dxf, ...) are extracted again "
            "when their recorded extractor differs from the current one (default: every kind)."
        ),
    ] = None,
    reextract_since: Annotated[
        str | None,
        Field(
            description="Also extract again the documents extracted by this extractor "
            "release (like 2.0) or a later one, even where their extractor is current."
        ),
    ] = None,
) -> RunSummary:
    started = time.perf_counter()
    settings = run_settings(
        data_dir,
        endpoint_url=endpoint_url or None,  # "" (a deployment's unset URL): AWS
        concurrency=concurrency,
        list_shards=list_shards,
        download_dir=download_dir or None,
        keep_files=keep_files if not keep_files else None,
        task_runner=task_runner,
    )
    run_id, target = str(flow_run.id or "local"), f"s3://{bucket}/{prefix}"
    spec = list_spec(
        settings,
        run_id,
        bucket,
        prefix,
        include=include,
        exclude=exclude,
        full_refresh=full_refresh,
        extract=extract,
        reextract_kinds=reextract_kinds,
        reextract_since=reextract_since,
        inventory=inventory if listing == "inventory" else None,
        inventory_listing=listing == "inventory",
    )
    with opened_run(settings, run_id, target=target, threads=BATCH_THREADS) as run:
        if run.skipped is not None:  # another live run holds the target
            return RunSummary(run_id=run_id, note=run.skipped)
        settings = run.ctx.settings
        check_bucket(settings, run_id, bucket)
        prepare_storage(settings, run_id)
        # The lake's upkeep (retention, compaction, vacuum of files replaced a week ago)
        # runs beside the listing, which waits on the network: nothing of the run is
        # committed before it ends, and the listing reads the state's files as they were.
        upkeep = start_upkeep(settings, list(S3_TABLES), run_id)
        summary = run_batches(
            run.ctx,
            spec,
            run.runner,
            extract=extract,
            summary=RunSummary(run_id=run_id),
            # On a cluster the workers, not this process, decide how many batches run at once.
            ahead=None if settings.task_runner == "dask" else BATCHES_AHEAD - 1,
        )
        run.ctx.work_done()  # the listing database and extraction pools close
        if upkeep is not None:  # none was due
            upkeep.result()
        summary.seconds = running_seconds(time.perf_counter() - started)
        summary.failing = too_many_failures(summary, settings.max_failed_ratio)
        summary = publish_and_commit(
            settings,
            run_id,
            lambda: publish_summary(settings, summary, f"s3-ingest {target}", target),
        )
    if summary.failing:  # the run fails for its failed objects (decided before its summary)
        raise TooManyFailuresError(
            f"{summary.failing}; see the run-summary artifact or "
            f"SELECT key, error FROM s3_objects WHERE status = 'failed' "
            f"AND run_id = '{summary.run_id}'"
        )
    return finish(summary)  # type: ignore[no-any-return]  # the summary, or Completed(data=it)
