"""Decide what to fetch, fetch it, and turn every outcome into a row.

Plain functions over an injected S3 client and settings: ``tasks/s3.py``
wraps them for Prefect, tests and benchmarks call them directly.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ingest import keys, s3
from ingest.errors import ItemError, TerminalError
from ingest.records import BatchSummary, ManifestEntry, ObjectResult, S3Object
from ingest.redact import redact
from ingest.settings import Settings

log = logging.getLogger(__name__)


def filter_page(
    objects: Iterable[S3Object], prefix: str, include: Sequence[str], exclude: Sequence[str]
) -> list[S3Object]:
    """Drop folder markers and keys the include/exclude globs leave out."""
    return [
        o
        for o in objects
        if not keys.is_folder_marker(o.key)
        and keys.matches_filters(keys.relative_key(o.key, prefix), include, exclude)
    ]


def is_unchanged(obj: S3Object, entry: ManifestEntry | None) -> bool:
    """True when an earlier run stored this exact object and its file is still there."""
    if entry is None or not entry.stored or entry.etag != obj.etag or entry.size != obj.size:
        return False
    if entry.local_path is None:
        return False
    try:
        return Path(entry.local_path).stat().st_size == obj.size
    except OSError:
        return False


def download_batch(
    client: Any,
    settings: Settings,
    objects: Sequence[S3Object],
    manifest: Mapping[str, ManifestEntry],
    *,
    prefix: str,
    run_id: str,
    full_refresh: bool = False,
) -> list[ObjectResult]:
    """Fetch the new and changed objects of a batch; one result per object.

    Unchanged objects (same ETag and size as the manifest, file present) are
    ``skipped`` without a request. Per-object failures become ``failed``
    rows; only a TerminalError (bucket gone, credentials revoked) raises.
    """
    now = datetime.now(UTC)
    results: list[ObjectResult] = []
    jobs: list[tuple[S3Object, Path]] = []
    root = settings.download_root(objects[0].bucket) if objects else settings.data_dir

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

    for obj in objects:
        entry = manifest.get(obj.key)
        if not full_refresh and is_unchanged(obj, entry):
            results.append(
                row(obj, local_path=entry.local_path if entry else None, status="skipped")
            )
            continue
        try:
            dest = keys.local_path_for(obj.key, prefix, root)
        except ItemError as exc:
            results.append(row(obj, local_path=None, status="failed", error=describe_error(exc)))
            continue
        jobs.append((obj, dest))

    for obj, dest, outcome in s3.BatchDownloader(client, settings, root).run(jobs):
        if isinstance(outcome, s3.Fetched):
            results.append(
                row(
                    obj,
                    local_path=str(dest),
                    status="downloaded",
                    attempts=outcome.attempts,
                    seconds=round(outcome.seconds, 6),
                )
            )
        elif isinstance(outcome, TerminalError):
            raise outcome
        else:
            attempts = outcome.attempts if isinstance(outcome, ItemError) else 1
            message = describe_error(outcome)
            log.warning("s3://%s/%s failed: %s", obj.bucket, obj.key, message)
            results.append(
                row(obj, local_path=None, status="failed", error=message, attempts=attempts)
            )
    return results


def deleted_results(
    manifest: Mapping[str, ManifestEntry],
    seen: set[str],
    *,
    bucket: str,
    prefix: str,
    include: Sequence[str],
    exclude: Sequence[str],
    run_id: str,
) -> list[ObjectResult]:
    """Rows marking as deleted the manifest keys that a complete listing no longer shows.

    Keys outside the include/exclude filters are left alone: they were not
    looked at. Local files are kept; earlier rows stay in ``s3_object_log``.
    """
    now = datetime.now(UTC)
    return [
        ObjectResult(
            bucket=bucket,
            key=key,
            etag=entry.etag,
            size=entry.size,
            last_modified=None,
            local_path=entry.local_path,
            status="deleted",
            run_id=run_id,
            ingested_at=now,
        )
        for key, entry in manifest.items()
        if key not in seen
        and key.startswith(prefix)
        and keys.matches_filters(keys.relative_key(key, prefix), include, exclude)
    ]


def describe_error(exc: BaseException) -> str:
    """The text stored in an error row: the error's kind and message, secrets masked."""
    return redact(f"{type(exc).__name__}: {exc}")


def summarize(results: Iterable[ObjectResult]) -> BatchSummary:
    summary = BatchSummary()
    for r in results:
        summary.add(r)
        summary.seconds += r.seconds
    return summary
