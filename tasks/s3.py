"""S3 tasks: check the bucket, plan and list chunks of the listing, download a batch
(``download-batch``, extracted by a later task), or download and extract it in one
task (``fetch-batch``, the whole job on the worker that runs it).

One retry layer per failure kind (see ``ingest.s3`` and docs/reliability.md): S3 requests
are retried by botocore (listing) and ``ingest.s3.get`` (GETs), so a task never
retries them again on top (``_whole_task_retry``: a listing page would cost up to
24 requests). A batch's staged Parquet part that cannot be written is written
again by itself (``stage_rows``), never by re-running the batch's downloads.
Nothing retries a TerminalError, which needs a person to fix configuration.
"""

from __future__ import annotations

import logging
from typing import Any

import botocore.exceptions as bce
import obstore.exceptions as obstore_exc
import pyarrow as pa
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from ingest import s3, storage
from ingest.backoff import Backoff
from ingest.context import RunContext
from ingest.errors import TerminalError
from ingest.extract import batch as extraction
from ingest.extract import structure
from ingest.records import BatchSummary, ChunkResult, ListedChunk, ObjectBatch
from ingest.s3 import chunks, fetch, sync
from ingest.s3 import scan as listing
from ingest.s3.scan import ListSpec
from ingest.settings import Settings
from ingest.storage.location import LakeLocation
from tasks.runners import run_context
from tasks.timing import timed

log = logging.getLogger(__name__)

# Failures a lower layer has retried already: botocore's and the GET path's request retries.
_RETRIED_BELOW: tuple[type[BaseException], ...] = (
    bce.BotoCoreError,
    bce.ClientError,
    obstore_exc.BaseError,
)
# A batch's rows that cannot be written (disk full, an I/O error): written again, 1 s and
# 2 s later.
STAGE_BACKOFF = Backoff(max_attempts=3, base=1.0, cap=5.0, jitter=0.0)


def _whole_task_retry(_task: Any, _run: Any, state: Any) -> bool:
    """Retry the task only for failures no lower layer retried and a person need not fix."""
    try:
        state.result()
    except TerminalError:
        return False
    except BaseException as exc:
        return not isinstance(exc, _RETRIED_BELOW)
    return True


def stage_rows(lake: LakeLocation, run_id: str, table: str, part: str, rows: pa.Table) -> None:
    """Stage a batch's rows, writing again after a failure (disk full, an I/O error) instead
    of letting a task retry fetch the batch again."""
    STAGE_BACKOFF.retrying(
        lambda: storage.stage(lake, run_id, table, part, rows),
        OSError,
        what=f"{table} rows of {part} not written",
    )


def pools(ctx: RunContext) -> dict[str, Any]:
    """The run's extraction pools and budget start, as ``extract_batch`` takes them (the
    OCR pool only with OCR on: no pool thread for a run that never OCRs)."""
    return {
        "pool": ctx.pool,
        "ocr_pool": ctx.ocr_pool if ctx.settings.ocr.enabled else None,
        "started": ctx.extract_started(),
    }


@task(name="check-bucket", cache_policy=NO_CACHE)
def check_bucket(settings: Settings, run_id: str, bucket: str) -> int:
    """Fail fast on a missing bucket or rejected credentials; sweep stale temp files."""
    s3.check_bucket(run_context(settings, run_id).s3.client, bucket)
    return s3.sweep_temp(settings.downloads.root(bucket))


@task(name="plan-listing", cache_policy=NO_CACHE)
def plan_listing(settings: Settings, spec: ListSpec) -> list[chunks.Shard]:
    """Split the listing into key-range shards listed concurrently (one by default), or
    fetch and sort the S3 Inventory report that replaces LIST calls."""
    ctx = run_context(settings, spec.run_id)
    with timed(ctx.lake, noun="shards") as t:
        shards = listing.plan(ctx.s3, ctx.s3_run, spec)
        t.items = len(shards)
    return shards


@task(
    name="list-objects",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_whole_task_retry,
)
def list_objects(
    settings: Settings, spec: ListSpec, shard: chunks.Shard, cursor: chunks.Cursor
) -> ListedChunk:
    """List one chunk of a shard (a few pages); the next chunk is listed while this one is
    compared with the stored state."""
    ctx = run_context(settings, spec.run_id)
    with timed(ctx.lake, noun="keys") as t:
        listed = listing.list_part(ctx.s3, ctx.listing, ctx.s3_run, spec, shard, cursor)
        t.items = listed.count
    return listed


@task(
    name="find-changes",
    cache_policy=NO_CACHE,
    retries=2,
    retry_condition_fn=_whole_task_retry,
)
def find_changes(settings: Settings, spec: ListSpec, listed: ListedChunk) -> ChunkResult:
    """Compare a listed chunk with the stored state: batches to fetch and to extract (refs,
    not the bucket), deletions staged, counts."""
    ctx = run_context(settings, spec.run_id)
    with timed(ctx.lake, noun="keys") as t:
        result = listing.find_changes(
            ctx.listing, ctx.s3_run, spec, listed, ctx.claims, lambda: ctx.s3.client
        )
        t.items = result.listed
    return result


@task(name="download-batch", cache_policy=NO_CACHE)
def download_batch(
    settings: Settings, spec: ListSpec, batch: ObjectBatch, extract: bool = False
) -> BatchSummary:
    """Download a batch and stage its rows as one part (named by the batch); with
    ``extract`` (its documents are extracted in this process next), the extraction workers
    start beside the download if they are not running yet, and what each file's first
    bytes decide is settled as it lands (``ingest.extract.landed``).

    No task retries: a per-object failure is a row (its requests were retried below), and
    rows that cannot be written are written again alone (``stage_rows``)."""
    ctx = run_context(settings, spec.run_id)
    settings = ctx.settings
    if extract:
        ctx.pool.warm()
    with timed(ctx.lake) as t:
        results = sync.download_batch(
            ctx.s3,
            settings.downloads.root(spec.bucket),
            batch.objects(),
            prefix=spec.prefix,
            run_id=spec.run_id,
            claims=ctx.claims,
            landed=ctx.landed if extract else None,
        )
        stage_rows(ctx.lake, spec.run_id, "s3_objects", batch.name, sync.results_table(results))
        summary = sync.summarize(results)
        summary.name = batch.name
        t.items = len(results)
        t.bytes = summary.bytes
    return summary


@task(name="fetch-batch", cache_policy=NO_CACHE)
def fetch_batch(
    settings: Settings,
    spec: ListSpec,
    batch: ObjectBatch,
    extract: bool,
    extractor: str = extraction.DEFAULT_EXTRACTOR,
) -> BatchSummary:
    """Download a batch, extract it and place or drop its files, all on this worker
    (``ingest.s3.fetch``); stage its ``s3_objects`` and ``documents`` rows as parts named by
    the batch (a re-run on another worker overwrites them instead of adding rows).

    No task retries, as ``download-batch``: per-object failures are rows. A worker lost
    mid-batch is Dask's to handle: the scheduler runs the batch again on another worker.
    """
    ctx = run_context(settings, spec.run_id)
    settings = ctx.settings
    if extract:
        ctx.pool.warm()  # the workers start while the batch downloads
    with timed(ctx.lake) as t:
        results, docs = fetch.fetch_batch(
            ctx.s3,
            settings.extracting,
            batch.objects(),
            prefix=spec.prefix,
            run_id=spec.run_id,
            extract=extract,
            extractor=extractor,
            **(pools(ctx) if extract else {}),
        )
        stage_rows(ctx.lake, spec.run_id, "s3_objects", batch.name, sync.results_table(results))
        summary = sync.summarize(results)
        summary.name = batch.name
        if extract:
            structure.stage_documents(ctx.lake, spec.run_id, batch.name, docs)
            summary.extracted = extraction.summarize(docs).note_failures(docs)
        t.items = len(results)
        t.bytes = summary.bytes
    return summary
