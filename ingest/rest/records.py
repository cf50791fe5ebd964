"""Typed records shared by every REST source; each becomes a row of one table."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any


class Row:
    """A dataclass record that is one row of a table."""

    __slots__ = ()

    def as_row(self) -> dict[str, Any]:
        """The record's fields as a row: a shallow copy. ``dataclasses.asdict`` copies
        every list and dict inside, recursively: 17 ms for a page's worth of 480 pull
        requests, against 1 ms this way (their lists go to the row as they are)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]


@dataclass(slots=True)
class ApiRequest(Row):
    """One row of ``api_requests``: one HTTP request (one attempt), sanitised.

    ``repo`` names what the request was for: a GitHub repository, or
    ``source/resource`` for a declared REST source.
    """

    run_id: str
    repo: str
    url: str
    status: int | None
    seconds: float
    bytes: int
    from_cache: bool
    rate_remaining: int | None
    rate_limit: int | None
    rate_resource: str | None
    attempt: int
    error: str | None
    requested_at: datetime


@dataclass(slots=True)
class HostWindow(Row):
    """One row of ``api_windows``: what a host allowed in flight, remembered for the next run."""

    host: str
    window_size: int
    ceiling: int | None
    limit_answers: int
    requests: int
    run_id: str
    updated_at: datetime


@dataclass
class RestSummary:
    """What a ``rest-ingest`` run did, returned to the flow and printed by the CLI."""

    run_id: str
    source: str
    resources: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0
    requests: int = 0
    limit_answers: int = 0
    failed_pages: int = 0
    window: int = 0
    ceiling: int | None = None
    max_in_flight: int = 0
    seconds: float = 0.0
    stopped: str | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)
    stages: list[dict[str, Any]] = field(default_factory=list)
    # columns the run's rows add to the source's tables (see ingest.storage.evolve)
    schema_changes: list[dict[str, Any]] = field(default_factory=list)
    # how a page size the source leaves open was planned from measured latency
    # (sizing.PagePlan.describe), and the plan's figures (PagePlan.figures: per_page,
    # in_flight, the fitted latency, the client's CPU a request ...): by resource for a
    # declared source, the one plan for GitHub's
    size_plan: str | None = None
    size_plan_figures: dict[str, Any] | None = None

    @property
    def complete(self) -> bool:
        return all(r.get("complete") for r in self.listings)

    @property
    def items(self) -> int:
        """Rows fetched (what the run's ``flow_runs`` row counts)."""
        return self.records

    @property
    def pages(self) -> int:
        return sum(r["pages"] for r in self.listings)

    @property
    def listings(self) -> list[dict[str, Any]]:
        """One row per listing of the run (the per-listing artifact): per resource; a
        GitHub source's per repository."""
        return self.resources


# --------------------------------------------------------------------------- GitHub dialect


def parse_time(value: str | None) -> datetime | None:
    """GitHub timestamps (``2026-01-02T03:04:05Z``) as aware datetimes."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC)


@dataclass(slots=True)
class PullRequest(Row):
    """One row of ``pull_requests``."""

    repo: str
    number: int
    id: int
    title: str
    state: str
    draft: bool
    user_login: str | None
    labels: list[str]
    created_at: datetime | None
    updated_at: datetime | None
    closed_at: datetime | None
    merged_at: datetime | None
    head_ref: str | None
    base_ref: str | None
    html_url: str | None
    body: str | None
    fetched_at: datetime
    run_id: str

    @classmethod
    def from_api(
        cls, repo: str, item: dict[str, Any], *, run_id: str, fetched_at: datetime
    ) -> PullRequest:
        return cls(
            repo=repo,
            number=int(item["number"]),
            id=int(item["id"]),
            title=str(item.get("title") or ""),
            state=str(item.get("state") or ""),
            draft=bool(item.get("draft")),
            user_login=(item.get("user") or {}).get("login"),
            labels=[str(lb.get("name")) for lb in item.get("labels") or []],
            created_at=parse_time(item.get("created_at")),
            updated_at=parse_time(item.get("updated_at")),
            closed_at=parse_time(item.get("closed_at")),
            merged_at=parse_time(item.get("merged_at")),
            head_ref=(item.get("head") or {}).get("ref"),
            base_ref=(item.get("base") or {}).get("ref"),
            html_url=item.get("html_url"),
            body=item.get("body"),
            fetched_at=fetched_at,
            run_id=run_id,
        )


@dataclass(slots=True)
class PageRecord(Row):
    """One row of ``github_pages``: what a page looked like when last fetched.

    The ETag is sent back as ``If-None-Match``; on a 304 the stored ``link``
    and ``oldest_updated_at`` stand in for the headers and items that a 304
    does not carry.
    """

    repo: str
    state: str
    per_page: int
    page: int
    url: str
    etag: str | None
    link: str | None
    items: int
    newest_updated_at: datetime | None
    oldest_updated_at: datetime | None
    run_id: str
    fetched_at: datetime


@dataclass(slots=True)
class SyncRecord(Row):
    """One row of ``github_syncs``: how far one run got with one (repo, state).

    ``watermark`` is the newest ``updated_at`` below which everything is known
    to be stored; it advances only when ``complete`` (the listing was read to
    its end, or down to the previous watermark).
    """

    repo: str
    state: str
    per_page: int
    watermark: datetime | None
    complete: bool
    stop_reason: str | None
    pages: int
    requests: int
    not_modified: int
    items: int
    failed_pages: int
    run_id: str
    started_at: datetime
    ended_at: datetime


@dataclass(slots=True)
class RepoState:
    """What earlier runs stored for one (repo, state), loaded before a run."""

    pages: dict[str, PageRecord] = field(default_factory=dict)  # by URL
    watermark: datetime | None = None  # of the last complete sync
    last_complete: bool = False  # whether the latest sync was complete
    per_page: int | None = None  # of the latest sync (kept so stored ETags stay valid)
    stored_items: int = 0


@dataclass(slots=True)
class RepoResult:
    """What one run did for one repository."""

    repo: str
    sync: SyncRecord
    pulls: list[PullRequest] = field(default_factory=list)
    # each pull request's record as the API gave it (its typed columns: ingest.rest.typed)
    records: list[dict[str, Any]] = field(default_factory=list)
    pages: list[PageRecord] = field(default_factory=list)
    requests: list[ApiRequest] = field(default_factory=list)
    error: str | None = None  # a terminal error (404 ...) for this repository
    error_kind: str | None = None
    rows_staged: bool = False  # pulls and records staged before the rest of the result


@dataclass
class GitHubSummary(RestSummary):
    """What a run of a ``dialect: github`` source did (the ``github-pulls`` flow's summary):
    the REST summary's figures, per repository, plus what is GitHub's own."""

    source: str = "github"
    repos: list[dict[str, Any]] = field(default_factory=list)
    pulls: int = 0
    not_modified: int = 0
    budget_spent: int = 0
    per_page: int = 0
    shared_limit: str | None = None  # the cluster's in-flight limit this run leased from
    shared_round_trips: int = 0  # calls to the Prefect server for the shared limits

    @property
    def items(self) -> int:
        return self.pulls

    @property
    def listings(self) -> list[dict[str, Any]]:
        return self.repos
