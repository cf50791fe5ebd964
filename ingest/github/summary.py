"""Human-readable run summaries of the GitHub source (CLI lines, markdown artifact)."""

from __future__ import annotations

from collections.abc import Callable

from ingest import markdown as md
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
    if summary.shared_limit:
        text += (
            f"\nshared limits: {summary.shared_limit} and the budget of its host, "
            f"{summary.shared_round_trips} calls to the Prefect server"
        )
    if summary.size_plan:
        text += f"\npage size: {summary.size_plan}"
    if summary.stopped:
        text += f"\nstopped early: {summary.stopped}"
    return text


TERMS = (
    "*requests*: HTTP calls made this run; *not modified*: requests answered 304 from a "
    "stored ETag (nothing new, and free of the rate-limit budget); *budget spent*: requests "
    "counted against the hourly rate limit; *per_page*: pull requests asked for per page "
    "(1-100; unless set, planned after a one-item probe of each repository from the latency "
    "it showed, the in-flight window and the budget); *max in flight*: the most requests open at "
    "once; *failed pages*: pages that still failed after their retries."
)


def markdown(summary: GitHubSummary, title: str, link: Callable[[str], str] | None = None) -> str:
    """The run-summary artifact; ``link`` makes the run id a link to the run."""
    text = headline(summary).replace("\n", "  \n")
    if link is not None:
        text = text.replace(f"run {summary.run_id}:", f"run {link(summary.run_id)}:", 1)
    lines = [f"# {title}", "", text, "", TERMS, ""]
    lines += [
        "| repo | complete | pull requests | requests | not modified | failed pages | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summary.repos:
        note = md.cell(r.get("error") or r.get("stop_reason") or "")
        lines.append(
            f"| {md.cell(r['repo'])} | {r['complete']} | {r['pull_requests']} | {r['requests']} | "
            f"{r['not_modified']} | {r['failed_pages']} | {note} |"
        )
    return "\n".join(lines)
