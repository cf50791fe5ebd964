"""Human-readable run summaries of the GitHub source (CLI lines, markdown artifact)."""

from __future__ import annotations

from ingest.github.records import GitHubSummary


def headline(summary: GitHubSummary) -> str:
    """``run R: 515 pull requests from 2 repositories, 18 requests (0 not modified) ...``."""
    text = (
        f"run {summary.run_id}: {summary.pulls} pull requests from {len(summary.repos)} "
        f"repositories, {summary.requests} requests ({summary.not_modified} not modified), "
        f"budget spent {summary.budget_spent}, per_page {summary.per_page}, "
        f"max in flight {summary.max_in_flight} (window {summary.window}"
        f"{f', ceiling {summary.ceiling}' if summary.ceiling else ''}), "
        f"{summary.seconds:.2f} s"
    )
    if summary.limit_answers:
        text += f", {summary.limit_answers} limit answers"
    if summary.failed_pages:
        text += f", {summary.failed_pages} failed pages"
    if summary.stopped:
        text += f"\nstopped early: {summary.stopped}"
    return text


def markdown(summary: GitHubSummary, title: str) -> str:
    lines = [f"# {title}", "", headline(summary).replace("\n", "  \n"), ""]
    lines += [
        "| repo | complete | pull requests | requests | not modified | failed pages | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary.repos:
        note = (r.get("error") or r.get("stop_reason") or "").replace("|", "/")
        lines.append(
            f"| {r['repo']} | {r['complete']} | {r['pull_requests']} | {r['requests']} | "
            f"{r['not_modified']} | {r['failed_pages']} | {note} |"
        )
    return "\n".join(lines)
