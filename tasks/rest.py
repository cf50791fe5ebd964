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

from typing import Any, cast

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ingest.rest import github, store
from ingest.rest.config import RestConfig
from ingest.rest.dialects import dialect_of
from ingest.rest.records import GitHubSummary, RepoState, RestSummary
from ingest.rest.run import fetch_source
from ingest.rest.source import Source
from ingest.rest.summary import listing_lines
from ingest.settings import Settings
from tasks.runners import run_context, submit
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
def fetch_rest_source(
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
    with timed(ctx.lake, noun="pull requests" if source.client.dialect else "records") as t:
        summary = fetch_source(
            RestConfig.of(ctx.settings, ctx.lake),
            source,
            run_id=run_id,
            base_url=base_url,
            load_block=load_secret_block,
            full_refresh=full_refresh,
            priors=priors,
            part=part,
            dialect=dialect_of(source),
        )
        t.items = summary.items
    logger = get_run_logger()
    for line in listing_lines(summary):
        logger.info("%s", line)
    return summary


# A GitHub source's fetch under the name its runs have always shown in the UI and tables.
fetch_pulls = fetch_rest_source.with_options(name="fetch-pulls")


# The tables every plain REST source's runs write beside its resources' own.
REST_TABLES = ("api_requests", "api_windows", "rest_syncs")


def tables_of(source: Source) -> list[str]:
    """The tables a run of the source writes, which its runs keep trimmed and compacted."""
    if source.client.dialect == "github":
        return list(github.TABLES)
    return [*(source.table(r) for r in source.resources), *REST_TABLES]


def fetch_all(
    runner: Any,
    settings: Settings,
    source: Source,
    *,
    run_id: str,
    base_url: str | None,
    full_refresh: bool,
) -> RestSummary:
    """Every listing of the source fetched on ``runner``: one task, or for a GitHub
    source, its stored state loaded first and, on Dask, one task per repository."""
    fetch = dict(settings=settings, run_id=run_id, base_url=base_url, full_refresh=full_refresh)
    if source.client.dialect != "github":
        return cast(RestSummary, submit(runner, fetch_rest_source, **fetch, source=source).result())
    priors = load_sync_state(settings, run_id, source, full_refresh)
    shares = (
        [source]
        if settings.task_runner == "thread"
        else [source.model_copy(update={"repos": [r]}) for r in source.repos]
    )
    futures = [
        submit(
            runner,
            fetch_pulls,
            **fetch,
            source=share,
            priors={r: priors[r] for r in share.repos},
            part="" if len(shares) == 1 else f"-{i}",
        )
        for i, share in enumerate(shares)
    ]
    return github.merge_summaries(run_id, [cast(GitHubSummary, f.result()) for f in futures])
