"""The ``s3-ingest`` flow: list a bucket, download new and changed objects.

Listing pages are fetched in the flow's thread while batches of the pages
already listed download on the task runner, so downloads start before the
listing ends. Each batch is one task run; the requests of all batches share
one pool sized for latency (``concurrency``), not for cores.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

from prefect import flow
from prefect.futures import PrefectFuture
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.parameters import described
from ingest.errors import IngestError
from ingest.records import BatchSummary, ExtractSummary
from ingest.report import RunSummary
from ingest.settings import Settings
from tasks.extraction import extract_batch
from tasks.progress import track_batch
from tasks.report import publish_summary
from tasks.s3 import check_bucket, download_batch, list_page, load_manifest, mark_deleted
from tasks.storage import update_warehouse


class TooManyFailuresError(IngestError):
    """More objects failed than ``max_failed_ratio`` allows."""


@flow(
    name="s3-ingest",
    description="Download new and changed objects of an S3 bucket/prefix into data_dir "
    "and record one row per object in Parquet and DuckDB.",
    # ignore: TaskRunner is invariant in its future type, so no runner instance fits
    # the decorator's annotation (PrefectHQ/prefect#16938).
    task_runner=ThreadPoolTaskRunner(max_workers=4),  # type: ignore[arg-type]
    validate_parameters=True,
)
@described
def s3_ingest(
    bucket: Annotated[str, Field(description="Bucket to ingest.", min_length=3, max_length=255)],
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
        str | None, Field(description="Folder for Parquet tables, warehouse.duckdb and objects.")
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
) -> RunSummary:
    started = time.perf_counter()
    settings = Settings()
    overrides = {
        "s3_endpoint_url": endpoint_url,
        "s3_concurrency": concurrency,
        "data_dir": Path(data_dir) if data_dir else None,
        "s3_download_dir": Path(download_dir) if download_dir else None,
    }
    settings = settings.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    include = list(settings.s3_include if include is None else include)
    exclude = list(settings.s3_exclude if exclude is None else exclude)
    run_id = str(flow_run.id or "local")

    check_bucket(settings, bucket)
    manifest = {} if full_refresh else load_manifest(settings, bucket, prefix)

    futures: list[PrefectFuture[BatchSummary]] = []
    extracting: list[PrefectFuture[ExtractSummary]] = []
    seen: set[str] = set()
    token: str | None = None
    while True:
        page = list_page(settings, bucket, prefix, include, exclude, token)
        for start in range(0, len(page.objects), settings.s3_batch_size):
            batch = page.objects[start : start + settings.s3_batch_size]
            seen.update(o.key for o in batch)
            futures.append(
                download_batch.submit(
                    settings, batch, manifest, prefix, run_id, len(futures), full_refresh
                )
            )
            if extract:  # starts when this download batch ends: overlaps the later ones
                # Prefect passes the download's result, not the future; its submit() overloads
                # type the arguments as the task's own parameters, so a future does not fit.
                extracting.append(
                    extract_batch.submit(  # type: ignore[call-overload]
                        settings, bucket, futures[-1], run_id, len(futures) - 1
                    )
                )
        if not page.next_token:
            break
        token = page.next_token

    summary = RunSummary(run_id=run_id)
    for fut in futures:
        part = fut.result()
        track_batch(part, batches=len(futures))
        for status, n in part.counts.items():
            summary.counts[status] = summary.counts.get(status, 0) + n
        summary.bytes += part.bytes
        summary.failures.extend(part.failures[: max(0, 20 - len(summary.failures))])
    for ext in extracting:
        summary.add_extracted(ext.result())
    deleted = mark_deleted(settings, manifest, seen, bucket, prefix, include, exclude, run_id)
    if deleted:
        summary.counts["deleted"] = deleted
    update_warehouse(settings)
    summary.seconds = time.perf_counter() - started
    summary = publish_summary(settings, summary, f"s3-ingest s3://{bucket}/{prefix}")

    looked_at = summary.total - summary.counts.get("deleted", 0)
    if looked_at and summary.failed / looked_at > settings.max_failed_ratio:
        raise TooManyFailuresError(
            f"{summary.failed} of {looked_at} objects failed (more than "
            f"{settings.max_failed_ratio:.0%}); see the run-summary artifact or "
            f"SELECT key, error FROM s3_objects WHERE status = 'failed' AND run_id = '{run_id}'"
        )
    return summary
