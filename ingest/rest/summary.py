"""Human-readable run summaries of a REST source (CLI lines, markdown artifact); a
``dialect: github`` source's summary says what is GitHub's own (per repository, 304s,
budget spent, the planned page size)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ingest import markdown as md
from ingest.report.timing import seconds_so_far
from ingest.rest.records import GitHubSummary, RestSummary


def headline(summary: RestSummary) -> str:
    """``run R: tickets: 840 records from 3 resources, 31 requests ...``."""
    if isinstance(summary, GitHubSummary):
        return github_headline(summary)
    unchanged = sum(r.get("unchanged", 0) for r in summary.resources)
    text = (
        f"run {summary.run_id}: {summary.source}: {summary.records} records"
        f"{f' ({unchanged} unchanged not counted)' if unchanged else ''} from "
        f"{len(summary.resources)} resources, {summary.requests} requests, "
        f"{summary.limit_answers} limit answers, {_in_flight(summary)}"
    )
    return text + _failed_plan_and_stop(summary)


def _in_flight(summary: RestSummary) -> str:
    """``max in flight 12 (window 8, ceiling 9), 1.2 s``."""
    ceiling = f", ceiling {summary.ceiling}" if summary.ceiling else ""
    return (
        f"max in flight {summary.max_in_flight} (window {summary.window}{ceiling}), "
        f"{seconds_so_far(summary.seconds)}"
    )


def _failed_plan_and_stop(summary: RestSummary, before: str = "") -> str:
    """What ends a headline: the failed pages, ``before`` (a line of its own), the planned
    page size, why the run stopped early."""
    text = f", {summary.failed_pages} failed pages" if summary.failed_pages else ""
    text += before + (f"\npage size: {summary.size_plan}" if summary.size_plan else "")
    return text + (f"\nstopped early: {summary.stopped}" if summary.stopped else "")


def _top(summary: RestSummary, headline: str, title: str, link: Callable[[str], str] | None) -> str:
    """An artifact's title and headline; ``link`` makes the run id a link to the run."""
    text = headline.replace("\n", "  \n")
    if link is not None:
        text = text.replace(f"run {summary.run_id}:", f"run {link(summary.run_id)}:", 1)
    return f"# {md.cell(title)}\n\n{text}\n"


def markdown(summary: RestSummary, title: str, link: Callable[[str], str] | None = None) -> str:
    """The run-summary artifact; ``link`` makes the run id a link to the run."""
    if isinstance(summary, GitHubSummary):
        return github_markdown(summary, title, link)
    lines = [_top(summary, headline(summary), title, link)]
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
            f"{r['page_size'] or 'not sent'} | {note} |"  # 0: the file's params decide
        )
    lines += schema_markdown(summary.schema_changes)
    return "\n".join(lines)


def schema_line(change: dict[str, Any]) -> str:
    """``shop__orders.total__v_text: variant (DOUBLE -> VARCHAR)``."""
    old = f"{change['old_type']} -> " if change.get("old_type") else ""
    return f"{change['table']}.{change['column']}: {change['change']} ({old}{change['new_type']})"


def schema_markdown(changes: list[dict[str, Any]]) -> list[str]:
    """The run's column changes (``schema_history``), as a list under the table."""
    if not changes:
        return []
    return ["", f"Schema changes ({len(changes)}):", ""] + [
        f"- {md.code(schema_line(c))}" for c in changes
    ]


def requests_text(summary: GitHubSummary) -> str:
    """How the run's requests add up: per repository (the rows of the github-repos table)
    and the others (the rate-limit check), and how many were answered 304."""
    for_repos = sum(int(r.get("requests") or 0) for r in summary.repos)
    other = summary.requests - for_repos
    text = f"{for_repos} for the repositories"
    if other:
        text += f", {other} rate-limit check{'' if other == 1 else 's'}"
    return text + f"; {summary.not_modified} not modified"


def github_headline(summary: GitHubSummary) -> str:
    """``run R: 515 pull requests from 2 repositories, 18 requests (0 not modified) ...``."""
    text = (
        f"run {summary.run_id}: {summary.pulls} pull requests from {len(summary.repos)} "
        f"repositories, {summary.requests} requests ({requests_text(summary)}), "
        f"budget spent {summary.budget_spent}, per_page {summary.per_page}, "
        f"{_in_flight(summary)}"
    )
    if summary.limit_answers:
        text += f", {summary.limit_answers} limit answers"
    shared = (
        f"\nshared limits: {summary.shared_limit} and the budget of its host, "
        f"{summary.shared_round_trips} calls to the Prefect server"
    )
    return text + _failed_plan_and_stop(summary, shared if summary.shared_limit else "")


TERMS = (
    "*requests*: HTTP calls made this run; *not modified*: requests answered 304 from a "
    "stored ETag (nothing new, and free of the rate-limit budget); *budget spent*: requests "
    "counted against the hourly rate limit; *per_page*: pull requests asked for per page "
    "(1-100; unless set, planned after a one-item probe of each repository from the latency "
    "it showed, the in-flight window and the budget); *max in flight*: the most requests open at "
    "once; *failed pages*: pages that still failed after their retries."
)


def github_markdown(
    summary: GitHubSummary, title: str, link: Callable[[str], str] | None = None
) -> str:
    """The run-summary artifact; ``link`` makes the run id a link to the run."""
    lines = [_top(summary, github_headline(summary), title, link), TERMS, ""]
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
    lines += schema_markdown(summary.schema_changes)
    return "\n".join(lines)


def listing_lines(summary: RestSummary) -> list[str]:
    """One log line per listing (per repository of a GitHub source)."""
    if isinstance(summary, GitHubSummary):
        return [
            f"{r['repo']}: {r['pull_requests']} pull requests, {r['requests']} requests "
            f"({r['not_modified']} not modified), "
            + ("complete" if r["complete"] else f"incomplete: {r['stop_reason'] or r['error']}")
            for r in summary.repos
        ]
    return [
        f"{r['resource']}: {r['records']} records in {r['listings']} listings, "
        f"{r['requests']} requests, "
        + ("complete" if r["complete"] else f"incomplete: {r['note']}")
        for r in summary.resources
    ]


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
