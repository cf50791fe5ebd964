"""Human-readable run summaries of a declared REST source (CLI lines, markdown artifact)."""

from __future__ import annotations

from ingest import markdown as md
from ingest.rest.records import RestSummary


def headline(summary: RestSummary) -> str:
    """``run R: tickets: 840 records from 3 resources, 31 requests ...``."""
    text = (
        f"run {summary.run_id}: {summary.source}: {summary.records} records from "
        f"{len(summary.resources)} resources, {summary.requests} requests, "
        f"{summary.limit_answers} limit answers, max in flight {summary.max_in_flight} "
        f"(window {summary.window}"
        f"{f', ceiling {summary.ceiling}' if summary.ceiling else ''}), {summary.seconds:.2f} s"
    )
    if summary.failed_pages:
        text += f", {summary.failed_pages} failed pages"
    if summary.stopped:
        text += f"\nstopped early: {summary.stopped}"
    return text


def markdown(summary: RestSummary, title: str) -> str:
    lines = [f"# {title}", "", headline(summary).replace("\n", "  \n"), ""]
    lines += [
        "| resource | table | listings | complete | records | pages | requests | failed pages "
        "| page size | note |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in summary.resources:
        note = md.cell(r.get("note") or "")
        lines.append(
            f"| {r['resource']} | {r['table']} | {r['listings']} | {r['complete']} | "
            f"{r['records']} | {r['pages']} | {r['requests']} | {r['failed_pages']} | "
            f"{r['page_size']} | {note} |"
        )
    return "\n".join(lines)


def too_many_failed_pages(failed: int, pages: int, ratio: float, run_id: str) -> str | None:
    """The run's error when more than ``ratio`` of its ``pages`` failed after their
    retries (with the query that lists them), else None."""
    if failed / (pages or 1) <= ratio:
        return None
    return (
        f"{failed} of {pages or 1} pages failed after their retries; see "
        f"SELECT url, status, error FROM api_requests "
        f"WHERE run_id = '{run_id}' AND error IS NOT NULL"
    )
