"""Fetch what changed and turn every outcome into a row.

Plain functions over an injected S3 connection and folder: ``tasks/s3.py``
wraps them for Prefect, tests and benchmarks call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from ingest import s3, storage
from ingest.errors import ItemError, NotFetchedError, TerminalError
from ingest.extract.detect import HEAD
from ingest.extract.landed import Landed
from ingest.records import BatchSummary, ObjectResult, S3Object
from ingest.redact import redact
from ingest.s3 import keys
from ingest.s3.tables import S3_OBJECTS
from ingest.storage import durable
from ingest.storage.location import DataDir

log = logging.getLogger(__name__)


def download_batch(
    conn: s3.S3Connection,
    root: Path,
    objects: Sequence[S3Object],
    *,
    prefix: str,
    run_id: str,
    claims: keys.RunClaims | None = None,
    landed: Landed | None = None,
) -> list[ObjectResult]:
    """Fetch a batch of new and changed objects (``ingest.s3.changes`` chose them) into
    ``root``, the local folder of their bucket and prefix; one result per object.
    ``claims``: the local paths the run's batches gave out (its context's), else this
    batch's own. ``landed``: where each small object's outcome is
    settled from its first bytes as it lands (its extraction follows in this process).

    Per-object failures become ``failed`` rows; only a TerminalError (bucket
    gone, credentials revoked) raises. A key whose local path another key of the run
    already has (``keys.PathClaims``; with ``s3_refuse_folded_collisions`` also a path
    differing only by case or normal form) is a failed row naming the other.
    """
    now = datetime.now(UTC)
    results: list[ObjectResult] = []
    jobs: list[tuple[S3Object, str]] = []

    def row(obj: S3Object, **kw: Any) -> ObjectResult:
        return ObjectResult(
            bucket=obj.bucket,
            key=obj.key,
            etag=obj.etag,
            size=obj.size,
            last_modified=obj.last_modified,
            run_id=run_id,
            ingested_at=now,
            **kw,
        )

    paths = (claims or keys.RunClaims()).for_root(root, conn.settings.refuse_folded_collisions)
    for obj in objects:
        try:
            dest = keys.local_path_for(obj.key, prefix, root)
        except ItemError as exc:
            results.append(row(obj, local_path=None, status="failed", error=describe_error(exc)))
            continue
        other = paths.claim(dest, obj.key)
        if other is not None:
            folded = " (differing only by case or Unicode normal form)" if paths.fold else ""
            error = redact(
                f"PathCollisionError: the local path of key {obj.key!r} is already that of "
                f"{other!r}{folded}; the key is not downloaded, so neither overwrites the other"
            )
            results.append(row(obj, local_path=None, status="failed", error=error))
            continue
        jobs.append((obj, dest))

    on_landed = (
        None
        if landed is None
        else lambda obj, dest, head: landed.land(dest, obj.key, obj.size, head)
    )
    for obj, dest, outcome in s3.BatchDownloader(conn, root).run(jobs, on_landed, HEAD):
        if isinstance(outcome, s3.Fetched):
            results.append(
                row(
                    obj,
                    local_path=dest,
                    status="downloaded",
                    attempts=outcome.attempts,
                    seconds=round(outcome.seconds, 6),
                )
            )
        elif isinstance(outcome, TerminalError):
            raise outcome
        elif isinstance(outcome, NotFetchedError):
            continue  # no row: the next run finds the object new and fetches it
        else:
            attempts = outcome.attempts if isinstance(outcome, ItemError) else 1
            message = describe_error(outcome)
            log.warning("s3://%s/%s failed: %s", obj.bucket, obj.key, message)
            results.append(
                row(obj, local_path=None, status="failed", error=message, attempts=attempts)
            )
    if any(r.status == "downloaded" for r in results):
        # The files reach the disk before the rows that call them downloaded are written.
        durable.sync_all()
    return results


def describe_error(exc: BaseException) -> str:
    """The text stored in an error row: the error's kind and message, secrets masked."""
    return redact(f"{type(exc).__name__}: {exc}")


def summarize(results: Iterable[ObjectResult]) -> BatchSummary:
    summary = BatchSummary()
    for r in results:
        summary.add(r)
        summary.seconds += r.seconds
    return summary


_COLUMNS = [f.name for f in S3_OBJECTS]


def results_table(results: Sequence[ObjectResult]) -> pa.Table:
    """The ``s3_objects`` rows of a batch, built column by column (``dataclasses.asdict``
    per object cost more than the rest of the row handling)."""
    schema = S3_OBJECTS
    return pa.table(
        {
            name: pa.array([getattr(r, name) for r in results], schema.field(name).type)
            for name in _COLUMNS
        },
        schema=schema,
    )


def downloaded(data_dir: DataDir, run_id: str, batch: str) -> list[tuple[str, str, str]]:
    """(key, etag, local path) of the objects a batch downloaded, from its staged rows."""
    staging = storage.staging
    run = staging.run_key(staging.safe_name(run_id))
    key = f"{run}/s3_objects/{staging.safe_name(batch)}.parquet"
    rows = staging.read_part(data_dir, key, columns=["key", "etag", "local_path", "status"])
    if rows is None:
        return []
    return [
        (k, e or "", p)
        for k, e, p, s in zip(
            *(rows.column(c).to_pylist() for c in ("key", "etag", "local_path", "status")),
            strict=True,
        )
        if s == "downloaded" and p
    ]
