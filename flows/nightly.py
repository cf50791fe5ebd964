"""The ``nightly`` flow: the S3 and GitHub ingestions at the same time, then one summary.

Each ingestion is a subflow (its own flow run, logs and artifacts, nested
under this one in the UI) called from this flow in a thread of its own, so both
ingestions run concurrently in the worker's one process (``run_children`` in
``tasks.nightly`` says why not from tasks). A failed child does not stop the other;
the nightly run fails afterwards with what failed and what to do in its state message.
Each child opens its own run context; the nightly's own (its lake session for the
summary, its progress bar, its ids) is opened first and closed last.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from prefect import flow
from prefect.runtime import flow_run
from prefect.states import Completed
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field

from flows.github_pulls import github_pulls
from flows.parameters import INGEST_FLOW, RepoName, flow_body, run_form
from flows.s3_ingest import s3_ingest
from ingest.errors import IngestError
from ingest.report.nightly import ChildOutcome, completed_message, failed_message
from tasks.nightly import publish_nightly_summary, run_children
from tasks.progress import publish_progress
from tasks.report import add_tags, failure_tags
from tasks.runs import nightly_settings, opened_run
from tasks.timing import running_seconds


class NightlyFailedError(IngestError):
    """One or both ingestions failed; the message says which and what to do (each
    failure's traceback is in its child run's logs)."""

    reports_failures = True


@run_form
@flow(
    name="nightly",
    **INGEST_FLOW,
    description="Run the S3 documents ingestion and the GitHub pull-request ingestion at the "
    "same time, then publish one summary comparing each stage with the previous nightly run.",
    # ignore: TaskRunner is invariant in its future type, so no runner instance fits
    # the decorator's annotation (PrefectHQ/prefect#16938).
    task_runner=ThreadPoolTaskRunner(max_workers=2),  # type: ignore[arg-type]
)
@flow_body
def nightly(
    bucket: Annotated[str, Field(min_length=3, max_length=63)],
    repos: Annotated[list[RepoName], Field(max_length=500)],
    prefix: str = "",
    endpoint_url: str | None = None,
    s3_concurrency: Annotated[int | None, Field(ge=1, le=512)] = None,
    extract: bool = True,
    github_base_url: str | None = None,
    github_per_page: Annotated[int | None, Field(ge=1, le=100)] = None,
    github_token_block: str | None = None,
    data_dir: str | None = None,
    full_refresh: bool = False,
    task_runner: Literal["thread", "dask"] = "thread",
) -> Any:
    """Both ingestions at the same time, then one summary.

    The descriptions below are what the UI's Custom run form shows under each
    field (Prefect reads them from this docstring); the bounds in the
    annotations are checked by the server before a run is created.

    Args:
        bucket: S3 bucket to ingest (3-63 characters).
        repos: GitHub repositories as owner/name; an empty list skips GitHub.
        prefix: Only S3 keys under this prefix.
        endpoint_url: S3-compatible endpoint (MinIO, Ceph, moto). Empty means AWS.
        s3_concurrency: S3 requests in flight, 1-512, sized for latency rather than cores.
            Empty: INGEST_S3_CONCURRENCY or 128.
        extract: Extract the text of new and changed documents.
        github_base_url: GitHub API root. Empty: https://api.github.com.
        github_per_page: Pull requests per page, 1-100. Empty chooses it from the
            rate-limit budget.
        github_token_block: Prefect Secret block holding the GitHub token. Empty: the
            GITHUB_TOKEN environment variable of the worker.
        data_dir: Folder for the Parquet tables and warehouse.duckdb, relative to the
            project folder. Empty: INGEST_DATA_DIR of the worker, else ./data.
        full_refresh: Fetch everything again, ignoring what earlier runs stored.
        task_runner: Where the children's batch tasks run: thread (the worker's process) or
            dask (the cluster at INGEST_DASK_ADDRESS, else a LocalCluster).
    """
    started = time.perf_counter()
    settings = nightly_settings(data_dir, github_base_url)
    s3_parameters = {
        "bucket": bucket,
        "prefix": prefix,
        "endpoint_url": endpoint_url,
        "concurrency": s3_concurrency,
        "extract": extract,
        "data_dir": data_dir,
        "full_refresh": full_refresh,
        "task_runner": task_runner,
    }
    github_parameters = {
        "repos": repos,
        "base_url": github_base_url,
        "per_page": github_per_page,
        "token_block": github_token_block,
        "data_dir": data_dir,
        "full_refresh": full_refresh,
        "task_runner": task_runner,
    }
    # The children commit their own rows; this run stages the summary rows it records
    # (the children's flow_runs rows under this parent) and commits them as it ends.
    run_id = str(flow_run.id or "local")
    with opened_run(settings, run_id, runner=False) as run:
        ctx = run.ctx
        children: list[tuple[Any, dict[str, Any], str]] = [
            (s3_ingest, s3_parameters, f"s3://{bucket}/{prefix or ''}")
        ]
        if repos:
            children.append((github_pulls, github_parameters, ", ".join(repos)))

        def finished(outcomes: list[ChildOutcome]) -> None:
            publish_progress(
                ctx,
                "nightly-progress",
                len(outcomes),
                len(children),
                f"{len(outcomes)} of {len(children)} ingestions finished: "
                + ", ".join(f"{o.flow_name} {o.verdict}" for o in outcomes),
            )

        outcomes = run_children(children, finished)
        seconds = running_seconds(time.perf_counter() - started)
        publish_nightly_summary(ctx.settings, run_id, outcomes, seconds)

    if any(not o.ok for o in outcomes):
        raise NightlyFailedError(failed_message(outcomes))
    message = completed_message(outcomes)
    if message:  # completed, but with failed items: said in the state and a tag
        add_tags(
            failure_tags(
                sum(o.failed_items for o in outcomes),
                sum(o.failed_extractions for o in outcomes),
            )
        )
        return Completed(message=message, data=outcomes)
    return outcomes
