"""Publish a run's summary: a log line per stage and Prefect artifacts."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE

from ingest import report
from ingest.settings import Settings
from tasks.history import compare_with_previous, record_current_run


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
    _, comparison = compare_with_previous(settings.data_dir, summary.stages)
    looked_at = summary.total - summary.counts.get("deleted", 0)
    too_many = bool(looked_at) and summary.failed / looked_at > settings.max_failed_ratio
    record_current_run(
        settings.data_dir,
        seconds=summary.seconds,
        items=summary.total,
        size=summary.bytes,
        failed=summary.failed,
        state="failed" if too_many else "completed",
    )
    create_markdown_artifact(
        key="run-summary",
        markdown=report.markdown(summary, title) + "\n" + comparison,
        description=title,
    )
    return summary
