"""REST source tasks: load a source's stored state, fetch it, publish its summary.

On the thread runner the whole fetch of a run is one task: every listing of the
source shares one event loop, one ``httpx.AsyncClient``, one adaptive window and
one rate-limit governor (a task per page would cost more orchestration than the
request itself). On a Dask cluster a ``dialect: github`` source is fetched by one
task per repository, spread over the workers; each pages its repository and stages
its rows to the lake on its worker, and the in-flight limit and the budget they
share are kept on the Prefect server (``ingest.rest.shared``). The fetch has no
Prefect retries: failed pages are rows, the watermark does not advance past them,
and the next run fetches them again. Credentials are resolved inside the task from
a Prefect ``Secret`` block or an environment variable; they are never a parameter.

Each task finds its run's context by the run's id (``tasks.runners.run_context``:
the flow's, or on a Dask worker the one it opens there, closed by the flow's batch
runner at the run's end) and works with its settings and its lake (``ctx.lake``),
reached through the run's lake session (credentials, client, the database for small
queries). The
HTTP client stays the fetch's own: it lives on the fetch's event loop, one per task.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from ingest.report import summary as report
from ingest.rest import github, store
from ingest.rest.dialects import dialect_of
from ingest.rest.records import GitHubSummary, RepoState, RestSummary
from ingest.rest.run import fetch_source as fetch_source_plain
from ingest.rest.source import Source
from ingest.rest.summary import listing_lines, markdown
from ingest.settings import Settings
from tasks.artifacts import Sends
from tasks.history import compare_with_previous, current_ids, record_current_run, run_link
from tasks.runners import run_context
from tasks.timing import timed


def load_secret_block(name: str) -> str:
    """The value of a Prefect ``Secret`` block."""
    from prefect.blocks.system import Secret

    block = Secret.load(name)
    # load() is typed "block or coroutine"; this runs in synchronous code, so it is the block.
    if not isinstance(block, Secret):
        raise TypeError(f"Secret.load returned {type(block).__name__}")
    return str(block.get())


@task(name="load-sync-state", cache_policy=NO_CACHE)
def load_sync_state(
    settings: Settings, run_id: str, source: Source, full_refresh: bool
) -> dict[str, RepoState]:
    """A ``dialect: github`` source's stored ETags and watermarks (none on a full refresh)."""
    lake = run_context(settings, run_id).lake
    with timed(lake, noun="pages") as t:
        if full_refresh:
            states = {r: RepoState() for r in source.repos}
        else:
            states = store.load_repo_states(lake, source.repos, github.state_of(source))
        t.items = sum(len(s.pages) for s in states.values())
    return states


@task(name="fetch-rest-source", cache_policy=NO_CACHE)
def fetch_source(
    settings: Settings,
    source: Source,
    run_id: str,
    base_url: str | None = None,
    full_refresh: bool = False,
    priors: dict[str, RepoState] | None = None,
    part: str = "",
) -> RestSummary:
    """Page every resource of the source and stage its rows (one part per listing).

    ``priors``: a GitHub source's stored state (``load-sync-state``); ``part`` tells
    apart the staged parts of several such tasks of one run."""
    ctx = run_context(settings, run_id)
    settings = ctx.settings
    with timed(ctx.lake, noun="pull requests" if source.client.dialect else "records") as t:
        summary = fetch_source_plain(
            settings,
            source,
            run_id=run_id,
            base_url=base_url,
            load_block=load_secret_block,
            full_refresh=full_refresh,
            priors=priors,
            part=part,
            dialect=dialect_of(source),
            lake=ctx.lake,
        )
        t.items = summary.items
    logger = get_run_logger()
    for line in listing_lines(summary):
        logger.info("%s", line)
    return summary


# A GitHub source's fetch under the name its runs have always shown in the UI and tables.
fetch_pulls = fetch_source.with_options(name="fetch-pulls")


@task(name="publish-summary", cache_policy=NO_CACHE)
def publish_summary(settings: Settings, summary: RestSummary, title: str) -> RestSummary:
    """Per-stage timing and per-listing figures as artifacts on the flow run, and the
    run's ``flow_runs`` row (what the next run compares itself with)."""
    ctx = run_context(settings, summary.run_id)
    ids = current_ids(ctx)
    with Sends() as send:  # each artifact beside the history work, not after it
        send(
            create_table_artifact,
            key="github-repos" if isinstance(summary, GitHubSummary) else "rest-resources",
            table=summary.listings,
            description=f"{title}: per listing",
        )
        summary.stages = report.stage_table(
            ctx.lake, summary.run_id, since=report.first_day(summary.seconds)
        )
        # What the run read, as the nightly names it: the repositories, or the source.
        target = (
            ", ".join(r["repo"] for r in summary.repos)
            if isinstance(summary, GitHubSummary)
            else summary.source
        )
        _, comparison = compare_with_previous(ctx.lake, summary.stages, ids, target=target)
        record_current_run(
            ctx.lake,
            ids,
            seconds=summary.seconds,
            items=summary.items,
            failed=summary.failed_pages,
            state="failed" if summary.errors else "completed",
            target=target,
            changed=summary.items,
        )
        send(
            create_table_artifact,
            key="stage-timing",
            table=summary.stages,
            description=f"{title}: per-stage timing",
        )
        send(
            create_markdown_artifact,
            key="run-summary",
            markdown=markdown(summary, title, link=run_link) + "\n" + comparison,
            description=title,
        )
    return summary
