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
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Annotated, Any, Literal, NamedTuple, cast

from prefect.futures import PrefectFuture, as_completed
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.parameters import deployment_defaults, described, ingest_flow
from ingest import context, security
from ingest.errors import IngestError
from ingest.extract import provenance
from ingest.records import BatchSummary, ExtractSummary, ObjectBatch
from ingest.report import summary as report
from ingest.report.summary import RunSummary
from ingest.s3.scan import ListSpec
from ingest.s3.schedule import Future, Steps, schedule
from ingest.settings import Settings
from tasks import limits
from tasks.extraction import extract_batch, extract_stored
from tasks.history import FINAL_HOOKS
from tasks.progress import track_batch
from tasks.report import finish, publish_summary
from tasks.runners import batch_runner, submit
from tasks.s3 import (
    check_bucket,
    download_batch,
    fetch_batch,
    find_changes,
    list_objects,
    plan_listing,
)
from tasks.storage import (
    hold_target,
    prepare_storage,
    publish_and_commit,
    run_staging,
    start_upkeep,
)
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


@ingest_flow(
    name="s3-ingest",
    **FINAL_HOOKS,
    timeout_seconds=limits.flow_seconds,
    description="Download new and changed objects of an S3 bucket/prefix into data_dir "
    "and record one row per object in Parquet and DuckDB.",
    # ignore: TaskRunner is invariant in its future type, so no runner instance fits
    # the decorator's annotation (PrefectHQ/prefect#16938).
    task_runner=ThreadPoolTaskRunner(max_workers=8),  # type: ignore[arg-type]
    validate_parameters=True,
)
@described
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
    with opened_run(settings, run_id, target) as run:
        if run.skipped is not None:  # another live run holds the target
            return RunSummary(run_id=run_id, note=run.skipped)
        settings = run.ctx.settings
        check_bucket(settings, run_id, bucket)
        prepare_storage(settings, run_id)
        # The lake's upkeep (retention, compaction, vacuum of files replaced a week ago)
        # runs beside the listing, which waits on the network: nothing of the run is
        # committed before it ends, and the listing reads the state's files as they were.
        upkeep = start_upkeep(settings, list(S3_TABLES), run_id)
        summary = schedule(
            plan_listing(settings, spec),
            batch_steps(run.ctx, spec, run.runner, extract=extract),
            RunSummary(run_id=run_id),
            # On a cluster the workers, not this process, decide how many batches run at once.
            ahead=None if settings.task_runner == "dask" else BATCHES_AHEAD - 1,
        )
        run.ctx.work_done()  # the listing database and extraction pools close
        if upkeep is not None:  # none was due
            upkeep.result()
        summary.seconds = running_seconds(time.perf_counter() - started)
        summary.failing = report.too_many_failures(summary, settings.max_failed_ratio)
        summary = publish_and_commit(
            settings,
            run_id,
            lambda: publish_summary(settings, summary, f"s3-ingest {target}", target),
        )
    check_failed_share(summary)
    return finish(summary)  # type: ignore[no-any-return]  # the summary, or Completed(data=it)


def run_settings(
    data_dir: str | None,
    *,
    endpoint_url: str | None,
    concurrency: int | None,
    list_shards: int | None,
    download_dir: str | None,
    keep_files: bool | None,
    task_runner: str | None,
) -> Settings:
    """The run's settings: the worker's, with the run's parameters that were given (None:
    the worker's own; the S3 ones are the ``s3`` group's fields of the same names) and its
    data folder, refused when the deployment's data folders forbid them
    (``ingest.security``)."""
    worker = Settings()
    s3 = dict(
        endpoint_url=endpoint_url,
        concurrency=concurrency,
        list_shards=list_shards,
        download_dir=download_dir,
    )
    run = dict(keep_files=keep_files, task_runner=task_runner)
    settings = worker.updated(
        s3={k: v for k, v in s3.items() if v is not None},
        **{k: v for k, v in run.items() if v is not None},
    )
    settings = settings.with_data_dir(data_dir)
    security.check_data_dirs(worker, settings, deployment_defaults())
    return settings


class OpenRun(NamedTuple):
    ctx: context.RunContext
    runner: Any  # the batches' task runner
    skipped: str | None  # why the run ends at once: another live run holds its target


@contextmanager
def opened_run(settings: Settings, run_id: str, target: str) -> Iterator[OpenRun]:
    """What the run holds open for its block, closed at its end: its context (lake
    session, S3 connection, listing database: ``ingest.context``, where its tasks find
    it by the run's id), its lease on ``target`` (one run at a time per bucket and prefix
    in this lake, ``INGEST_S3_SAME_TARGET``), its staging and the batches' runner."""
    with ExitStack() as stack:
        ctx = stack.enter_context(context.opened(settings, run_id))
        skipped = stack.enter_context(hold_target(ctx.settings, target, run_id))
        if skipped is not None:
            yield OpenRun(ctx, None, skipped)
            return
        stack.enter_context(run_staging(ctx.settings, run_id))
        runner = stack.enter_context(batch_runner(ctx.settings, BATCH_THREADS, run_id=run_id))
        yield OpenRun(ctx, runner, None)


def list_spec(
    settings: Settings,
    run_id: str,
    bucket: str,
    prefix: str,
    *,
    include: list[str] | None,
    exclude: list[str] | None,
    full_refresh: bool,
    extract: bool,
    reextract_kinds: list[str] | None,
    reextract_since: str | None,
    inventory: str | None,
    inventory_listing: bool,
) -> ListSpec:
    """What the run lists and compares; a ValueError, before anything is written, for an
    inventory listing without its report or a download folder over the lake's files."""
    if inventory_listing and not inventory:
        raise ValueError("listing='inventory' needs inventory: the s3://... of the report")
    overlap = settings.download_overlap(bucket)
    if overlap:  # keys must never land on the lake's files
        raise ValueError(overlap)
    return ListSpec(
        run_id=run_id,
        bucket=bucket,
        prefix=prefix,
        include=list(settings.s3.include if include is None else include),
        exclude=list(settings.s3.exclude if exclude is None else exclude),
        full_refresh=full_refresh,
        extract_version=provenance.versions(settings.extracting) if extract else None,
        reextract_kinds=tuple(reextract_kinds or ()),
        reextract_since=reextract_since,
        inventory=inventory,
    )


def check_failed_share(summary: RunSummary) -> None:
    """A TooManyFailuresError when the run fails for its failed objects (``failing``,
    decided before its summary was written): the run is Failed, with the query that
    lists them."""
    if summary.failing:
        raise TooManyFailuresError(
            f"{summary.failing}; see the run-summary artifact or "
            f"SELECT key, error FROM s3_objects WHERE status = 'failed' "
            f"AND run_id = '{summary.run_id}'"
        )


def batch_steps(ctx: context.RunContext, spec: ListSpec, runner: Any, *, extract: bool) -> Steps:
    """The run's tasks as ``schedule`` submits them: the listing and comparison on the
    flow's threads, the batches on ``runner``. A batch is one ``fetch-batch`` (download
    and extraction together) when it may run on another machine or its files do not stay
    in a local folder a later task could read, else ``download-batch`` then
    ``extract-batch``."""
    settings, bucket, run_id = ctx.settings, spec.bucket, spec.run_id
    whole = settings.task_runner == "dask" or not settings.downloads.stay_local

    def fetch(batch: ObjectBatch) -> PrefectFuture[BatchSummary]:
        task = fetch_batch if whole else download_batch
        return submit(runner, task, settings=settings, spec=spec, batch=batch, extract=extract)

    def extract_fetched(downloaded: Future[BatchSummary]) -> PrefectFuture[ExtractSummary]:
        # Prefect resolves the future to its result when the task starts.
        return submit(
            runner,
            extract_batch,
            settings=settings,
            bucket=bucket,
            run_id=run_id,
            downloaded=downloaded,
        )

    def stored(batch: ObjectBatch) -> PrefectFuture[ExtractSummary]:
        return submit(
            runner,
            extract_stored,
            settings=settings,
            bucket=bucket,
            run_id=run_id,
            objects=batch,
            prefix=spec.prefix,
        )

    return Steps(
        list_chunk=lambda shard, cursor: list_objects.submit(settings, spec, shard, cursor),
        compare=lambda listed: find_changes.submit(settings, spec, listed),
        fetch=fetch,
        first_done=lambda futures: next(as_completed(cast(list[PrefectFuture[Any]], futures))),
        extract_fetched=extract_fetched if extract and not whole else None,
        extract_stored=stored,
        on_batch=lambda part, handed_out: track_batch(ctx, part, batches=handed_out),
    )
