"""Extraction task: the stored objects of one download batch become ``documents`` rows.

The flow submits one ``extract-batch`` per download batch with that batch's
future as input, so each starts as soon as its download ends and extraction
overlaps the downloads still running. The CPU work runs on the process's
warm worker pool (``ingest.extract.pool``), not on the task runner's threads.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from ingest import storage
from ingest.extract import batch
from ingest.records import BatchSummary, ExtractSummary
from ingest.settings import Settings
from tasks.timing import timed


@task(name="extract-batch", cache_policy=NO_CACHE)
def extract_batch(
    settings: Settings,
    bucket: str,
    downloaded: BatchSummary,
    run_id: str,
    batch_no: int,
    extractor: str = batch.DEFAULT_EXTRACTOR,
) -> ExtractSummary:
    """Extract the new and changed objects of a download batch and write their rows as one
    Parquet part (named by run and batch, so a retry overwrites instead of duplicating)."""
    with timed(settings.data_dir, noun="documents") as t:
        stored = downloaded.stored
        previous = batch.load_extracted(settings.data_dir, bucket, (s[0] for s in stored))
        todo = batch.select_changed(stored, previous)
        docs = batch.extract_batch(settings, bucket, todo, run_id=run_id, extractor=extractor)
        if docs:
            storage.write_part(
                settings.data_dir,
                "documents",
                run_id,
                f"batch-{batch_no:06d}",
                [d.as_row() for d in docs],
            )
        summary = batch.summarize(docs, unchanged=len(stored) - len(todo))
        t.items = len(docs)
        t.bytes = summary.bytes
    return summary
