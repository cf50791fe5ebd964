"""The ``github-pulls`` flow: pull requests of many repositories, incrementally.

On the thread runner one task fetches every repository concurrently (one shared
HTTP client, one in-flight limit, one rate-limit governor) and stores each
repository as it ends; on a Dask cluster each repository is a task of its own,
spread over the workers under the in-flight limit and budget they share on the
Prefect server (``ingest.rest.shared``). The flow loads the stored state first
(the lake's upkeep runs beside the fetch) and publishes the summary last. A run
stopped by the rate limit completes with the reason in its summary and in
``github_syncs.stop_reason``; the next run resumes. A missing repository fails
the run after the others are stored; a rejected token fails it at once.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal

from prefect import get_run_logger
from prefect.runtime import flow_run
from pydantic import Field

from flows.parameters import deployment_defaults, described, ingest_flow
from ingest import security
from ingest.github.errors import GitHubTerminalError
from ingest.github.records import GitHubSummary
from ingest.github.run import merge_summaries
from ingest.github.sync import check_repo
from ingest.rest.summary import too_many_failed_pages
from ingest.settings import Settings
from tasks import limits
from tasks.github import fetch_pulls, load_sync_state, publish_summary
from tasks.runners import batch_runner, submit
from tasks.storage import maintain_lake, prepare_storage, publish_and_commit, run_staging

# The tables this flow writes, which its runs keep trimmed and compacted.
GITHUB_TABLES = (
    "pull_requests",
    "pull_request_log",
    "api_requests",
    "github_pages",
    "github_syncs",
)


class TooManyFailedPagesError(GitHubTerminalError):
    """More pages failed after their retries than ``max_failed_ratio`` allows."""


@ingest_flow(
    name="github-pulls",
    timeout_seconds=limits.FLOW_SECONDS,
    description="Fetch the pull requests of GitHub repositories concurrently, within the rate "
    "limit and incrementally (ETags, updated_at watermark), into Parquet and DuckDB.",
    validate_parameters=True,
)
@described
def github_pulls(
    repos: Annotated[
        list[str], Field(description="Repositories as owner/name.", min_length=1, max_length=500)
    ],
    state: Annotated[
        Literal["open", "closed", "all"] | None,
        Field(description="Pull requests to list: open, closed or all (default all)."),
    ] = None,
    per_page: Annotated[
        int | None,
        Field(
            description="Items per page, 1-100. Empty chooses it from the remaining budget and "
            "the expected number of pull requests (smaller pages answer faster and run in "
            "parallel, but each costs one request of the budget).",
            ge=1,
            le=100,
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        Field(
            description="Requests in flight across all repositories (at most 100).", ge=1, le=100
        ),
    ] = None,
    base_url: Annotated[
        str | None,
        Field(
            description="API root; GitHub Enterprise uses https://HOST/api/v3. "
            "Empty: https://api.github.com."
        ),
    ] = None,
    token_block: Annotated[
        str | None,
        Field(
            description="Name of a Prefect Secret block holding the token. Empty: the GITHUB_TOKEN "
            "environment variable, else unauthenticated (60 requests/hour)."
        ),
    ] = None,
    rate_limit_reserve: Annotated[
        int | None, Field(description="Requests of the hourly budget never spent.", ge=0)
    ] = None,
    max_wait: Annotated[
        float | None,
        Field(
            description="Longest wait in seconds for the rate limit to reset; beyond it the run "
            "stops cleanly and the next run resumes.",
            ge=0,
        ),
    ] = None,
    data_dir: Annotated[
        str | None,
        Field(
            description="Folder for the tables and warehouse.duckdb, or s3://bucket/prefix "
            "for a lake on object storage."
        ),
    ] = None,
    full_refresh: Annotated[
        bool, Field(description="Fetch every page again, ignoring stored ETags and watermarks.")
    ] = False,
    task_runner: Annotated[
        Literal["thread", "dask"],
        Field(
            description="Where the fetch task runs: thread (this process) or dask (the cluster "
            "at INGEST_DASK_ADDRESS, else a LocalCluster). The ingest command's default: "
            "INGEST_TASK_RUNNER."
        ),
    ] = "thread",
) -> GitHubSummary:
    started = time.perf_counter()
    overrides = {
        "github_state": state,
        "github_per_page": per_page,
        "github_concurrency": concurrency,
        "github_base_url": base_url,
        "github_rate_limit_reserve": rate_limit_reserve,
        "github_max_wait": max_wait,
        "task_runner": task_runner,
    }
    worker = Settings()
    settings = worker.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    settings = settings.with_data_dir(data_dir)
    security.check_github_run(worker, settings, deployment_defaults())
    repos = [check_repo(r) for r in dict.fromkeys(repos)]
    run_id = str(flow_run.id or "local")

    with run_staging(settings, run_id), batch_runner(settings) as runner:
        prepare_storage(settings, run_id)
        # The lake's upkeep runs beside the fetch, which waits on the network: nothing of
        # the run is committed before it ends, and the stored state is read as it was.
        upkeep = maintain_lake.submit(settings, list(GITHUB_TABLES))
        priors = load_sync_state(settings, repos, full_refresh)
        # Thread runner: one task, every repository in one event loop. Dask: one task per
        # repository, so that the cluster's workers share the repositories.
        groups = [repos] if settings.task_runner == "thread" else [[r] for r in repos]
        futures = [
            submit(
                runner,
                fetch_pulls,
                settings=settings,
                repos=group,
                priors={r: priors[r] for r in group},
                run_id=run_id,
                token_block=token_block,
                full_refresh=full_refresh,
                part="" if len(groups) == 1 else f"-{i}",
            )
            for i, group in enumerate(groups)
        ]
        summary = merge_summaries(run_id, [f.result() for f in futures])
        upkeep.result()
        summary.seconds = time.perf_counter() - started
        summary = publish_and_commit(
            settings,
            run_id,
            lambda: publish_summary(settings, summary, f"github-pulls ({len(repos)} repositories)"),
        )

    if summary.stopped:
        get_run_logger().warning("stopped early, the next run resumes: %s", summary.stopped)
    if summary.errors:
        _, error = summary.errors[0]
        raise GitHubTerminalError(
            f"{len(summary.errors)} of {len(repos)} repositories failed; first: {error}"
        )
    pages = sum(r["pages"] for r in summary.repos)
    failed = too_many_failed_pages(summary.failed_pages, pages, settings.max_failed_ratio, run_id)
    if failed:
        raise TooManyFailedPagesError(failed)
    return summary
