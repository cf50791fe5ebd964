"""Publish a run's summary: a log line per stage and Prefect artifacts."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from ingest import report
from ingest.settings import Settings


@task(name="publish-summary", cache_policy=NO_CACHE)
def publish_summary(
    settings: Settings, summary: report.RunSummary, title: str
) -> report.RunSummary:
    """Attach per-stage timing (a table artifact) and the outcome (markdown) to the flow run."""
    summary.stages = report.stage_table(settings.data_dir, summary.run_id)
    logger = get_run_logger()
    for s in summary.stages:
        logger.info(
            "stage %s: %s task runs, %s items, %s bytes, wall %.2f s",
            s["stage"],
            s["task_runs"],
            s["items"],
            s["bytes"],
            s["wall_seconds"] or 0,
        )
    create_table_artifact(
        key="stage-timing", table=summary.stages, description=f"{title}: per-stage timing"
    )
    create_markdown_artifact(
        key="run-summary", markdown=report.markdown(summary, title), description=title
    )
    return summary
