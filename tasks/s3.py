"""S3 tasks: check the bucket, list a page, download a batch, mark deletions.

Task retries are the third retry layer (see ``ingest.s3``): they re-run a
whole batch after failures that no object row can hold. They never retry a
TerminalError, which needs a person to fix configuration.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from ingest import s3, storage, sync
from ingest.errors import TerminalError
from ingest.records import BatchSummary, ManifestEntry, S3Object
from ingest.settings import Settings
from tasks.timing import timed


def _not_terminal(_task: Any, _run: Any, state: Any) -> bool:
    try:
        state.result()
    except TerminalError:
        return False
    except BaseException:
        return True
    return True


def client_for(settings: Settings) -> Any:
    """The shared client, with credentials from a Prefect AwsCredentials block if named."""
    credentials: dict[str, str] | None = None
    if settings.s3_credentials_block:
        from prefect_aws import AwsCredentials

        block = AwsCredentials.load(settings.s3_credentials_block)
        # load() is typed "block or coroutine" (Prefect dispatches on the calling context);
        # this task is synchronous, so it gets the block.
        if not isinstance(block, AwsCredentials):
            raise TypeError(f"AwsCredentials.load returned {type(block).__name__}")
        credentials = {
            k: v
            for k, v in {
                "aws_access_key_id": block.aws_access_key_id,
                "aws_secret_access_key": block.aws_secret_access_key.get_secret_value()
                if block.aws_secret_access_key
                else None,
                "aws_session_token": block.aws_session_token,
                "region_name": block.region_name,
                "profile_name": block.profile_name,
            }.items()
            if v
        }
    return s3.make_client(settings, credentials)


@task(name="check-bucket", cache_policy=NO_CACHE)
def check_bucket(settings: Settings, bucket: str) -> int:
    """Fail fast on a missing bucket or rejected credentials; sweep stale temp files."""
    s3.check_bucket(client_for(settings), bucket)
    return s3.sweep_temp(settings.download_root(bucket))


@task(name="load-manifest", cache_policy=NO_CACHE)
def load_manifest(settings: Settings, bucket: str, prefix: str) -> dict[str, ManifestEntry]:
    with timed(settings.data_dir, noun="keys") as t:
        manifest = storage.load_manifest(settings.data_dir, bucket, prefix)
        t.items = len(manifest)
    return manifest


@task(
    name="list-page",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_not_terminal,
)
def list_page(
    settings: Settings,
    bucket: str,
    prefix: str,
    include: list[str],
    exclude: list[str],
    token: str | None,
) -> s3.ListPage:
    """One listing page (up to 1,000 keys), filtered."""
    with timed(settings.data_dir, noun="keys") as t:
        page = s3.list_page(client_for(settings), bucket, prefix, token)
        page.objects = sync.filter_page(page.objects, prefix, include, exclude)
        t.items = len(page.objects)
    return page


@task(
    name="download-batch",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
    retry_jitter_factor=0.5,
    retry_condition_fn=_not_terminal,
)
def download_batch(
    settings: Settings,
    objects: list[S3Object],
    manifest: dict[str, ManifestEntry],
    prefix: str,
    run_id: str,
    batch_no: int,
    full_refresh: bool = False,
) -> BatchSummary:
    """Download a batch and write its rows as one Parquet part (named by run and batch,
    so a retry overwrites instead of duplicating)."""
    with timed(settings.data_dir) as t:
        results = sync.download_batch(
            client_for(settings),
            settings,
            objects,
            manifest,
            prefix=prefix,
            run_id=run_id,
            full_refresh=full_refresh,
        )
        storage.write_part(
            settings.data_dir,
            "s3_objects",
            run_id,
            f"batch-{batch_no:06d}",
            [r.as_row() for r in results],
        )
        summary = sync.summarize(results)
        t.items = len(results)
        t.bytes = summary.bytes
    return summary


@task(name="mark-deleted", cache_policy=NO_CACHE)
def mark_deleted(
    settings: Settings,
    manifest: dict[str, ManifestEntry],
    seen: set[str],
    bucket: str,
    prefix: str,
    include: list[str],
    exclude: list[str],
    run_id: str,
) -> int:
    """Mark keys gone from a complete listing as deleted (files and history are kept)."""
    with timed(settings.data_dir, noun="keys") as t:
        rows = sync.deleted_results(
            manifest,
            seen,
            bucket=bucket,
            prefix=prefix,
            include=include,
            exclude=exclude,
            run_id=run_id,
        )
        if rows:
            storage.write_part(
                settings.data_dir, "s3_objects", run_id, "deleted", [r.as_row() for r in rows]
            )
        t.items = len(rows)
    return len(rows)
