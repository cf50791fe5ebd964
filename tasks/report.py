"""Publish a run's summary: a log line per stage and Prefect artifacts."""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.client.orchestration import get_client
from prefect.runtime import flow_run
from prefect.states import Completed

from ingest.report import summary as report
from ingest.report.timing import human_bytes, seconds_so_far
from ingest.settings import Settings
from tasks.artifacts import Sends
from tasks.history import compare_with_previous, current_ids, record_current_run
from tasks.progress import publish_progress
from tasks.runners import run_context

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
def publish_summary(
    settings: Settings, summary: report.RunSummary, title: str, target: str = ""
) -> report.RunSummary:
    """Attach per-stage timing (a table artifact) and the outcome (markdown) to the flow run."""
    ctx = run_context(settings, summary.run_id)
    ids = current_ids(ctx)
    summary.stages = report.stage_table(
        ctx.lake, summary.run_id, since=report.first_day(summary.seconds)
    )
    logger = get_run_logger()
    for s in summary.stages:
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
    with Sends() as send:  # each artifact beside the history work, not after it
        send(
            create_table_artifact,
            key="stage-timing",
            table=summary.stages,
            description=f"{title}: per-stage timing",
        )
        _, comparison = compare_with_previous(ctx.lake, summary.stages, ids, target=target)
        too_many = bool(summary.failing)
        record_current_run(
            ctx.lake,
            ids,
            seconds=summary.seconds,
            items=summary.total,
            size=summary.bytes,
            failed=summary.failed,
            state="failed" if too_many else "completed",
            target=target,
            changed=sum(summary.counts.get(k, 0) for k in ("downloaded", "copied", "deleted")),
        )
        send(
            create_markdown_artifact,
            key="run-summary",
            markdown=report.markdown(summary, title) + "\n" + comparison,
            description=title,
        )
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
