"""S3 tasks: check the bucket, plan and list chunks of the listing, download a batch.

Task retries are the third retry layer (see ``ingest.s3``): they re-run a
whole batch after failures that no object row can hold. They never retry a
TerminalError, which needs a person to fix configuration.
"""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from ingest import listing, s3, storage, sync
from ingest.errors import TerminalError
from ingest.listing import ListSpec
from ingest.records import BatchSummary, ChunkResult, ListedChunk, ObjectBatch
from ingest.s3 import chunks
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


@task(name="plan-listing", cache_policy=NO_CACHE)
def plan_listing(settings: Settings, spec: ListSpec) -> list[chunks.Shard]:
    """Split the listing into key-range shards listed concurrently (one by default), or
    fetch and sort the S3 Inventory report that replaces LIST calls."""
    with timed(settings.data_dir, noun="shards") as t:
        shards = listing.plan(client_for(settings), settings, spec)
        t.items = len(shards)
    return shards


@task(
    name="list-objects",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=2),
    retry_jitter_factor=0.5,
    retry_condition_fn=_not_terminal,
)
def list_objects(
    settings: Settings, spec: ListSpec, shard: chunks.Shard, cursor: chunks.Cursor
) -> ListedChunk:
    """List one chunk of a shard (a few pages); the next chunk is listed while this one is
    compared with the stored state."""
    with timed(settings.data_dir, noun="keys") as t:
        listed = listing.list_part(client_for(settings), settings, spec, shard, cursor)
        t.items = listed.count
    return listed


@task(name="find-changes", cache_policy=NO_CACHE, retries=2, retry_condition_fn=_not_terminal)
def find_changes(settings: Settings, spec: ListSpec, listed: ListedChunk) -> ChunkResult:
    """Compare a listed chunk with the stored state: batches to fetch and to extract (refs,
    not the bucket), deletions staged, counts."""
    with timed(settings.data_dir, noun="keys") as t:
        result = listing.find_changes(settings, spec, listed)
        t.items = result.listed
    return result


@task(
    name="download-batch",
    cache_policy=NO_CACHE,
    retries=2,
    retry_delay_seconds=exponential_backoff(backoff_factor=5),
    retry_jitter_factor=0.5,
    retry_condition_fn=_not_terminal,
)
def download_batch(settings: Settings, spec: ListSpec, batch: ObjectBatch) -> BatchSummary:
    """Download a batch and stage its rows as one part (named by the batch, so a retry
    overwrites instead of duplicating)."""
    with timed(settings.data_dir) as t:
        results = sync.download_batch(
            client_for(settings),
            settings,
            batch.objects(),
            prefix=spec.prefix,
            run_id=spec.run_id,
        )
        storage.stage(
            settings.data_dir, spec.run_id, "s3_objects", batch.name, sync.results_table(results)
        )
        summary = sync.summarize(results)
        summary.name = batch.name
        t.items = len(results)
        t.bytes = summary.bytes
    return summary
