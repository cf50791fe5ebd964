"""REST source tasks: fetch a declared source, publish its summary.

The whole fetch of a run is one task, as for GitHub: every listing of the source
shares one event loop, one ``httpx.AsyncClient``, one adaptive window and one
rate-limit governor. Credentials are resolved inside the task from a Prefect
``Secret`` block or an environment variable; they are never a parameter.
"""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from ingest import report
from ingest.rest.records import RestSummary
from ingest.rest.run import fetch_source as fetch_source_plain
from ingest.rest.source import load_source
from ingest.rest.summary import markdown
from ingest.settings import Settings
from tasks.history import record_current_run
from tasks.timing import timed


def load_secret_block(name: str) -> str:
    """The value of a Prefect ``Secret`` block."""
    from prefect.blocks.system import Secret

    block = Secret.load(name)
    # load() is typed "block or coroutine"; this runs in synchronous code, so it is the block.
    if not isinstance(block, Secret):
        raise TypeError(f"Secret.load returned {type(block).__name__}")
    return str(block.get())


@task(name="fetch-rest-source", cache_policy=NO_CACHE)
def fetch_source(
    settings: Settings,
    source_file: str,
    run_id: str,
    base_url: str | None = None,
    concurrency: int | None = None,
    full_refresh: bool = False,
) -> RestSummary:
    """Page every resource of the source and stage its rows (one part per listing)."""
    source = load_source(source_file)
    if concurrency:
        source = source.model_copy(
            update={"client": source.client.model_copy(update={"concurrency": concurrency})}
        )
    with timed(settings.lake, noun="records") as t:
        summary = fetch_source_plain(
            settings,
            source,
            run_id=run_id,
            base_url=base_url,
            load_block=load_secret_block,
            full_refresh=full_refresh,
        )
        t.items = summary.records
    logger = get_run_logger()
    for r in summary.resources:
        logger.info(
            "%s: %s records in %s listings, %s requests, %s",
            r["resource"],
            r["records"],
            r["listings"],
            r["requests"],
            "complete" if r["complete"] else f"incomplete: {r['note']}",
        )
    return summary


@task(name="publish-rest-summary", cache_policy=NO_CACHE)
def publish_summary(settings: Settings, summary: RestSummary, title: str) -> RestSummary:
    """Per-stage timing and per-resource figures as artifacts on the flow run."""
    summary.stages = report.stage_table(
        settings.lake, summary.run_id, since=report.first_day(summary.seconds)
    )
    create_table_artifact(
        key="rest-resources", table=summary.resources, description=f"{title}: per resource"
    )
    create_table_artifact(
        key="stage-timing", table=summary.stages, description=f"{title}: per-stage timing"
    )
    record_current_run(
        settings.lake,
        seconds=summary.seconds,
        items=summary.records,
        failed=summary.failed_pages,
        state="failed" if summary.errors else "completed",  # as github-pulls records it
        target=summary.source,
        changed=summary.records,
    )
    create_markdown_artifact(
        key="run-summary", markdown=markdown(summary, title), description=title
    )
    return summary
