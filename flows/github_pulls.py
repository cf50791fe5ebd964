"""The ``github-pulls`` flow: pull requests of many repositories, incrementally.

The flow builds the declared source of its parameters (``client.dialect: github``,
``ingest.rest.github.github_source``) and runs it as ``rest-ingest`` runs a source
file (``flows.rest_ingest.ingest_source``). On the thread runner one task fetches
every repository concurrently (one shared HTTP client, one in-flight limit, one
rate-limit governor) and stores each repository as it ends; on a Dask cluster each
repository is a task of its own, spread over the workers under the in-flight limit
and budget they share on the Prefect server (``ingest.rest.shared``). A run stopped
by the rate limit completes with the reason in its summary and in
``github_syncs.stop_reason``; the next run resumes. A missing repository fails the
run after the others are stored; a rejected token fails it at once.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal, cast

from prefect import flow
from prefect.runtime import flow_run
from pydantic import Field

from flows.parameters import INGEST_FLOW, FetchRunner, RepoName, flow_body, run_form
from flows.rest_ingest import ingest_source
from ingest.rest.records import GitHubSummary
from tasks.runs import github_run


@run_form
@flow(
    name="github-pulls",
    **INGEST_FLOW,
    description="Fetch the pull requests of GitHub repositories concurrently, within the rate "
    "limit and incrementally (ETags, updated_at watermark), into Parquet and DuckDB.",
)
@flow_body
def github_pulls(
    repos: Annotated[
        list[RepoName],
        Field(description="Repositories as owner/name.", min_length=1, max_length=500),
    ],
    state: Annotated[
        Literal["open", "closed", "all"] | None,
        Field(description="Pull requests to list: open, closed or all (default all)."),
    ] = None,
    per_page: Annotated[
        int | None,
        Field(
            description="Items per page, 1-100. Empty plans it from the latency measured on "
            "page 1 and the remaining budget (smaller pages answer faster and run in "
            "parallel, but each costs one request of the budget).",
            ge=1,
            le=100,
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        Field(
            description="Requests in flight across all repositories (at most 100, GitHub's "
            "documented ceiling, the default).",
            ge=1,
            le=100,
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
        int | None,
        Field(description="Requests of the hourly budget never spent (default 100).", ge=0),
    ] = None,
    max_wait: Annotated[
        float | None,
        Field(
            description="Longest wait in seconds for the rate limit to reset (default 900); "
            "beyond it the run stops cleanly and the next run resumes.",
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
    task_runner: FetchRunner = "thread",
) -> GitHubSummary:
    started = time.perf_counter()
    settings, source = github_run(
        data_dir,
        task_runner,
        repos,
        state=state,
        per_page=per_page,
        concurrency=concurrency,
        base_url=base_url,
        token_block=token_block,
        rate_limit_reserve=rate_limit_reserve,
        max_wait=max_wait,
    )
    summary = ingest_source(
        settings,
        source,
        run_id=str(flow_run.id or "local"),
        started=started,
        full_refresh=full_refresh,
        title=f"github-pulls ({len(source.repos)} repositories)",
    )
    return cast(GitHubSummary, summary)
