"""Publish a run's summary: a log line per stage and Prefect artifacts."""

from __future__ import annotations

from typing import Any, TypeVar

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run
from prefect.states import Completed

from ingest.report import summary as report
from ingest.report.timing import human_bytes, seconds_so_far
from ingest.rest import summary as rest_summary
from ingest.rest.records import GitHubSummary, RestSummary
from ingest.settings import Settings
from tasks.artifacts import sends
from tasks.history import compare_with_previous, current_ids, record_current_run, run_link
from tasks.progress import publish_progress
from tasks.runners import run_context

S = TypeVar("S", report.RunSummary, RestSummary)
FAILED_OBJECTS_TAG = "failed-objects"
FAILED_EXTRACTIONS_TAG = "failed-extractions"


def failure_tags(failed_objects: int, failed_extractions: int) -> set[str]:
    """The run-list signposts of a run that completed with failed items."""
    tags = {FAILED_OBJECTS_TAG} if failed_objects else set()
    return tags | ({FAILED_EXTRACTIONS_TAG} if failed_extractions else set())


def add_tags(tags: set[str]) -> None:
    """Add ``tags`` to the current flow run (a signpost: failing to is only logged)."""
    if not tags:
        return
    try:
        with get_client(sync_client=True) as client:
            run_id = flow_run.id
            if run_id:
                have = client.read_flow_run(run_id).tags or []
                client.update_flow_run(run_id, tags=sorted({*have, *tags}))
    except Exception as exc:  # the tag is a signpost; the state message still says it
        get_run_logger().warning("tags %s not added: %s", sorted(tags), exc)


@task(name="publish-summary", cache_policy=NO_CACHE)
def publish_summary(settings: Settings, summary: S, title: str, target: str = "") -> S:
    """Attach per-stage timing (a table artifact) and the outcome (markdown) to the flow
    run, a REST run's listings too, and record the run's ``flow_runs`` row (what the next
    run compares itself with). An S3 run's stages and failed objects are logged as well,
    and its progress bar says what was done."""
    ctx = run_context(settings, summary.run_id)
    ids = current_ids(ctx)
    with sends() as send:  # each artifact beside the history work, not after it
        if isinstance(summary, RestSummary):
            send(
                create_table_artifact,
                key="github-repos" if isinstance(summary, GitHubSummary) else "rest-resources",
                table=summary.listings,
                description=f"{title}: per listing",
            )
        summary.stages = report.stage_table(
            ctx.lake, summary.run_id, since=report.first_day(summary.seconds)
        )
        if isinstance(summary, report.RunSummary):
            log_stages(summary.stages)
            figures = s3_figures(summary)
            outcome = report.markdown(summary, title)
        else:
            # What the run read, as the nightly names it: the repositories, or the source.
            target = (
                ", ".join(r["repo"] for r in summary.repos)
                if isinstance(summary, GitHubSummary)
                else summary.source
            )
            figures = rest_figures(summary)
            outcome = rest_summary.markdown(summary, title, link=run_link)
        send(
            create_table_artifact,
            key="stage-timing",
            table=summary.stages,
            description=f"{title}: per-stage timing",
        )
        _, comparison = compare_with_previous(ctx.lake, summary.stages, ids, target=target)
        record_current_run(ctx.lake, ids, seconds=summary.seconds, target=target, **figures)
        send(
            create_markdown_artifact,
            key="run-summary",
            markdown=outcome + "\n" + comparison,
            description=title,
        )
        if isinstance(summary, report.RunSummary):
            log_failed(summary)
            counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.counts.items())) or "nothing"
            send(  # the finished bar says what was done, not only "100 %"
                publish_progress,
                ctx,
                "download-progress",
                1,
                1,
                f"Finished: {summary.total} objects ({counts}), {human_bytes(summary.bytes)} "
                f"downloaded, {seconds_so_far(summary.seconds)}",
            )
    return summary


def s3_figures(summary: report.RunSummary) -> dict[str, Any]:
    """An S3 run's figures in its ``flow_runs`` row."""
    return dict(
        items=summary.total,
        size=summary.bytes,
        failed=summary.failed,
        state="failed" if summary.failing else "completed",
        changed=sum(summary.counts.get(k, 0) for k in ("downloaded", "copied", "deleted")),
    )


def rest_figures(summary: RestSummary) -> dict[str, Any]:
    """A REST run's figures in its ``flow_runs`` row."""
    return dict(
        items=summary.items,
        failed=summary.failed_pages,
        state="failed" if summary.errors else "completed",
        changed=summary.items,
    )


def log_stages(stages: list[dict[str, Any]]) -> None:
    """A log line per stage of the run."""
    logger = get_run_logger()
    for s in stages:
        logger.info(
            "stage %s: %s task runs (%.2f s in tasks, the sum of their lines' figures), "
            "%s items, %s bytes, wall %.2f s",
            s["stage"],
            s["task_runs"],
            s["busy_seconds"] or 0,
            s["items"],
            s["bytes"],
            s["wall_seconds"] or 0,
        )


def log_failed(summary: report.RunSummary) -> None:
    """A warning per failed document the summary names, and one for the rest."""
    logger = get_run_logger()
    for key, error, permanent in report.failed_items(summary):  # one line per document
        logger.warning(
            "failed%s: %s: %s",
            " (permanent)"
            if permanent
            else " (archived: restore it)"
            if report.archived_object_error(error)
            else "",
            key,
            report.short(error, 300),
        )
    unnamed = summary.failed + summary.failed_extractions - len(report.failed_items(summary))
    if unnamed > 0:
        logger.warning("%s more failed; the run-summary artifact has the query", unnamed)


def finish(summary: report.RunSummary) -> Any:
    """What the flow returns: its summary, or, when objects or extractions failed (under
    the threshold), a Completed state whose message says so, with the run tagged
    ``failed-objects`` / ``failed-extractions``, so the run stands out in the run list
    instead of reading as a plain green Completed."""
    message = report.failed_objects_message(summary)
    if not message:
        return summary
    add_tags(failure_tags(summary.failed, summary.failed_extractions))
    return Completed(message=message, data=summary)
