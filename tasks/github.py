"""GitHub tasks: load the stored sync state, fetch pull requests, publish the summary.

On the thread runner the whole fetch of a run is one task: every repository's
pages share one event loop, one ``httpx.AsyncClient``, one in-flight window and
one rate-limit governor (a task per page would cost more orchestration than the
request itself). On a Dask cluster the flow submits one task per repository,
spread over the workers; each pages its repository and stages its rows to the
lake on its worker, and the in-flight limit and the budget they share are kept
on the Prefect server (``ingest.rest.shared``). The fetch has no Prefect
retries: failed pages are rows, the watermark does not advance past them, and
the next run fetches them again.
"""

from __future__ import annotations

import os

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from ingest import report
from ingest.github import store
from ingest.github.records import GitHubSummary, RepoState
from ingest.github.run import fetch_pulls as fetch_pulls_plain
from ingest.github.summary import markdown
from ingest.redact import register_secret
from ingest.settings import Settings
from tasks.history import compare_with_previous, record_current_run, run_link
from tasks.timing import timed


def resolve_token(settings: Settings, token_block: str | None) -> str | None:
    """The token from a Prefect ``Secret`` block, else ``GITHUB_TOKEN``, else
    ``INGEST_GITHUB_TOKEN``; None means unauthenticated (60 requests/hour)."""
    token: str | None = None
    if token_block:
        from prefect.blocks.system import Secret

        block = Secret.load(token_block)
        # load() is typed "block or coroutine" (Prefect dispatches on the calling context);
        # this runs in synchronous code, so it gets the block.
        if not isinstance(block, Secret):
            raise TypeError(f"Secret.load returned {type(block).__name__}")
        token = str(block.get())
    elif os.environ.get("GITHUB_TOKEN"):
        token = os.environ["GITHUB_TOKEN"]
    elif settings.github_token is not None:
        token = settings.github_token.get_secret_value()
    register_secret(token)
    return token or None


@task(name="load-sync-state", cache_policy=NO_CACHE)
def load_sync_state(
    settings: Settings, repos: list[str], full_refresh: bool
) -> dict[str, RepoState]:
    """Stored ETags and watermarks of earlier runs (none on a full refresh)."""
    with timed(settings.lake, noun="pages") as t:
        if full_refresh:
            states = {r: RepoState() for r in repos}
        else:
            states = store.load_states(settings.lake, repos, settings.github_state)
        t.items = sum(len(s.pages) for s in states.values())
    return states


@task(name="fetch-pulls", cache_policy=NO_CACHE)
def fetch_pulls(
    settings: Settings,
    repos: list[str],
    priors: dict[str, RepoState],
    run_id: str,
    token_block: str | None = None,
    full_refresh: bool = False,
    part: str = "",
) -> GitHubSummary:
    """Page every repository concurrently and store each as it ends (one part per repository).

    ``part`` tells apart the staged parts of several such tasks of one run."""
    token = resolve_token(settings, token_block)  # resolved here: never a task parameter
    with timed(settings.lake, noun="pull requests") as t:
        summary = fetch_pulls_plain(
            settings,
            repos,
            run_id=run_id,
            token=token,
            priors=priors,
            full_refresh=full_refresh,
            part=part,
        )
        t.items = summary.pulls
    logger = get_run_logger()
    for r in summary.repos:
        logger.info(
            "%s: %s pull requests, %s requests (%s not modified), %s",
            r["repo"],
            r["pull_requests"],
            r["requests"],
            r["not_modified"],
            "complete" if r["complete"] else f"incomplete: {r['stop_reason'] or r['error']}",
        )
    return summary


@task(name="publish-github-summary", cache_policy=NO_CACHE)
def publish_summary(settings: Settings, summary: GitHubSummary, title: str) -> GitHubSummary:
    """Per-stage timing and per-repository figures as artifacts on the flow run."""
    summary.stages = report.stage_table(
        settings.lake, summary.run_id, since=report.first_day(summary.seconds)
    )
    create_table_artifact(
        key="github-repos", table=summary.repos, description=f"{title}: per repository"
    )
    create_table_artifact(
        key="stage-timing", table=summary.stages, description=f"{title}: per-stage timing"
    )
    _, comparison = compare_with_previous(settings.lake, summary.stages)
    record_current_run(
        settings.lake,
        seconds=summary.seconds,
        items=summary.pulls,
        failed=summary.failed_pages,
        state="failed" if summary.errors else "completed",
        target=", ".join(r["repo"] for r in summary.repos),  # as the nightly names it
        changed=summary.pulls,
    )
    create_markdown_artifact(
        key="run-summary",
        markdown=markdown(summary, title, link=run_link) + "\n" + comparison,
        description=title,
    )
    return summary
