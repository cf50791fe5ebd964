"""Extraction tasks: stored objects become ``documents`` rows.

The flow submits one ``extract-batch`` per download batch with that batch's
future as input, so each starts as soon as its download ends; its files were taken
up as they landed (``ingest.extract.landed``: what their first bytes decide settled,
the rest already parsing on the run's workers), so extraction overlaps the downloads
still running and the batch's task collects and stages the rows; ``extract-stored``
takes unchanged objects whose text is missing or was extracted by an older extractor
version. The CPU work runs on the run's worker pool in this process
(``ingest.extract.pool``, held by the run's context), not on the task runner's threads.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from prefect import task
from prefect.cache_policies import NO_CACHE

from ingest.extract import batch, structure
from ingest.records import BatchSummary, ExtractSummary, ObjectBatch
from ingest.s3 import fetch, sync
from ingest.settings import Settings
from tasks.runners import run_context
from tasks.s3 import pools
from tasks.timing import timed


def _extract(
    settings: Settings,
    bucket: str,
    run_id: str,
    name: str,
    stored: list[tuple[str, str, str]],
    extractor: str,
) -> ExtractSummary:
    ctx = run_context(settings, run_id)
    with timed(ctx.lake, noun="documents") as t:
        docs = batch.extract_batch(
            ctx.settings.extracting,
            bucket,
            stored,
            run_id=run_id,
            extractor=extractor,
            landed=ctx.landed,
            **pools(ctx),
        )
        structure.stage_documents(ctx.lake, run_id, name, docs)
        summary = batch.summarize(docs).note_failures(docs)
        t.items = len(docs)
        t.bytes = summary.bytes
    return summary


@task(name="extract-batch", cache_policy=NO_CACHE)
def extract_batch(
    settings: Settings,
    bucket: str,
    run_id: str,
    downloaded: BatchSummary,
    extractor: str = batch.DEFAULT_EXTRACTOR,
) -> ExtractSummary:
    """Extract what a download batch fetched; stage the rows as one part named by the
    batch (a retry overwrites instead of duplicating)."""
    stored = sync.downloaded(run_context(settings, run_id).lake, run_id, downloaded.name)
    return _extract(settings, bucket, run_id, downloaded.name, stored, extractor)


@task(name="extract-stored", cache_policy=NO_CACHE)
def extract_stored(
    settings: Settings,
    bucket: str,
    run_id: str,
    objects: ObjectBatch,
    extractor: str = batch.DEFAULT_EXTRACTOR,
    prefix: str = "",
) -> ExtractSummary:
    """Extract unchanged objects whose text is missing or outdated: from their files where
    this worker can read them, else from their copy on object storage or the source
    (``ingest.s3.fetch.materialize``; on a cluster the file may be on another machine)."""
    settings = run_context(settings, run_id).settings
    stored = objects.stored()
    # a file elsewhere than the run's download folders (an earlier download folder) is
    # fetched again into one: the parsers' fence lets them read only those
    extracting = settings.extracting
    if all(
        p and Path(p).is_file() and batch.parsers_can_read(extracting, p) for _k, _e, p in stored
    ):
        return _extract(settings, bucket, run_id, objects.name, stored, extractor)
    with tempfile.TemporaryDirectory(prefix="ingest-extract-", dir=batch.work_root()) as tmp:
        readable = fetch.materialize(
            run_context(settings, run_id).s3,
            extracting,
            objects.objects(),
            [p for _k, _e, p in stored],
            prefix=prefix,
            folder=Path(tmp),
        )
        return _extract(settings, bucket, run_id, objects.name, readable, extractor)
