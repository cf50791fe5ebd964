"""One repository's pull-request listing: the hooks of the GitHub dialect's run
(``GitHubDialect``), which ``ingest.rest.run.SourceRun`` calls where GitHub differs from
a declared source; ``ingest.rest.github`` declares the source and plans the run.

For each repository (all of them concurrently, under the client's one
in-flight limit):

1. Page 1 of ``/repos/{owner}/{repo}/pulls?state=S&sort=updated&direction=desc``
   is requested with ``If-None-Match`` when an ETag is stored. A 304 after a
   complete sync means nothing changed: done, no budget spent.
2. Its ``Link`` header (``rel="last"``) gives the remaining pages. Without a
   watermark (first run, full refresh) they are all requested at once; with
   one, in waves that double (1, 2, 4 ... up to the in-flight limit) until a
   page holds items older than the watermark: the list is sorted by
   ``updated`` descending and the pulls endpoint has no ``since`` filter.
   Without ``rel="last"`` the sync follows ``rel="next"``. This is the paging
   loop of every REST source (``ingest.rest.engine.walk``); what is GitHub's
   own is in ``GitHubDialect.fetch`` (ETags, the watermark, pull-request rows).
3. Every stored page ETag is sent back, so pages unchanged since a run that
   stopped early answer 304 for free when the next run resumes.

When the page size is automatic (a first sync, a full refresh), a **probe**
comes first: page 1 with one pull request (``per_page=1``), whose ``rel="last"``
page number is the listing's exact size and whose latency is the host's. Once
every such repository of the run has been probed, one page size is planned for
them all (``ingest.rest.sizing.SizePlanner``: the latency the probes showed, the
in-flight window's model, the budget), and each listing is then read at that
size, page 1 included, all its pages at once. The probe costs one request per
repository; its pull request is read again on page 1.

The watermark (newest ``updated_at`` below which everything is stored)
advances only when a sync completes: it read the listing to its end, or down
to the previous watermark, without a failed page. A run stopped by the rate
limit keeps what it fetched and leaves the watermark where it was.

Known limit of any offset-paged listing: a pull request updated *while* a
first full listing runs can shift another one across a page boundary so that
it is missed. Later incremental runs never miss changes (changed pull
requests move to page 1); a periodic ``full_refresh`` heals the rare miss.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from ingest.redact import redact
from ingest.rest import store
from ingest.rest.client import RestClient
from ingest.rest.dialect import Run
from ingest.rest.engine import Listing, Page, probe_page_one
from ingest.rest.errors import MalformedPageError, RateLimitStop
from ingest.rest.records import (
    ApiRequest,
    GitHubSummary,
    PageRecord,
    PullRequest,
    RepoResult,
    RepoState,
    SyncRecord,
)
from ingest.rest.shared import SharedLimits
from ingest.rest.sizing import PER_PAGE_MAX, SizePlanner
from ingest.rest.source import Resource
from ingest.rest.transport import safe_url

log = logging.getLogger(__name__)


def pulls_url(repo: str, state: str, per_page: int) -> str:
    """The first page's URL, relative to the client's base URL."""
    return f"repos/{repo}/pulls?state={state}&sort=updated&direction=desc&per_page={per_page}"


@dataclass(slots=True)
class SyncOptions:
    state: str
    per_page: int  # with a planner: until the plan is made (and if the probe fails)
    full_refresh: bool
    run_id: str
    planner: SizePlanner | None = None  # the page size is planned after a probe
    # stages the pull requests (store.write_pull_rows) while page 1 is looked at again
    stage_rows: Callable[[RepoResult], Awaitable[None]] | None = None


LISTING_MOVED = (
    "the listing changed while it was read (pull requests opened or updated meanwhile); "
    "the next run reads it again"
)


@dataclass(slots=True)
class RepoListing:
    """What the dialect keeps of one repository's listing beside the run's ``Listing``
    (which holds the page size, page and failure counts, watermark, newest stamp and
    outcome): the stored ETags, the pull requests and page records read."""

    repo: str
    opts: SyncOptions
    stored: dict[str, PageRecord]  # by page URL
    trust_304: bool  # page 1 unchanged since a complete sync means nothing changed
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    records: dict[int, dict[str, Any]] = field(default_factory=dict)  # as the API gave them
    pages: list[PageRecord] = field(default_factory=list)
    duplicates: int = 0
    first_etag: str | None = None
    rows_staged: bool = False
    result: RepoResult | None = None


class GitHubDialect(Run):
    """The hooks ``ingest.rest.run.SourceRun`` calls for each repository's listing: one
    listing per repository (``listings``), the options and stored state it starts from
    (``open``), the probes (``probe``), the first page's URL, the page ``fetch`` with
    ETags and the watermark, the final look at page 1 (``close``), the result it stores
    (``done``) and the run's summary."""

    def __init__(
        self,
        repos: Sequence[str],
        opts_for: Callable[[str], SyncOptions],
        priors: dict[str, RepoState],
        on_result: Callable[[RepoResult], Awaitable[None]] | None = None,
        location: Any = None,
    ) -> None:
        self.repos, self.opts_for, self.priors, self.on_result = repos, opts_for, priors, on_result
        self.location = location  # where the run stages (its schema changes for the summary)
        self.planner: SizePlanner | None = None  # the run's, for its summary
        self.per_page = PER_PAGE_MAX  # the page size of the summary when no sync ran

    def listings(self, resource: Resource, table: str) -> list[Listing]:
        return [Listing(resource, table, label=r) for r in self.repos]

    def newest_first(self, listing: Listing) -> bool:
        return listing.watermark is not None  # sorted by updated, newest first

    def unstored(self, client: RestClient) -> list[ApiRequest]:
        """Requests that belong to no repository (the ``/rate_limit`` probe); each
        repository's own are staged with its result."""
        return [r for r in client.requests if not r.repo]

    def open(self, listing: Listing) -> None:
        repo = listing.label
        opts, prior = self.opts_for(repo), self.priors.get(repo) or RepoState()
        listing.page_size = opts.per_page
        listing.watermark = None if opts.full_refresh else prior.watermark
        listing.own = RepoListing(
            repo,
            opts,
            stored={} if opts.full_refresh else prior.pages,
            trust_304=(
                not opts.full_refresh and prior.last_complete and prior.watermark is not None
            ),
        )

    def first_url(self, listing: Listing) -> str:
        return pulls_url(listing.label, listing.own.opts.state, listing.page_size)

    async def fetch(self, gh: RestClient, listing: Listing, url: str, page_no: int) -> Page:
        """One page, for the paging loop: its items become pull requests and a page record;
        ``stop`` when it reaches the watermark, or when page 1 is unchanged since a
        complete sync (for a 304, the stored ``Link`` header stands in)."""
        own: RepoListing = listing.own
        prior = own.stored.get(safe_url(gh.http.base_url.join(url)))
        answer = await gh.get(url, label=own.repo, etag=prior.etag if prior else None)
        if page_no == 1:
            own.first_etag = answer.etag or (prior.etag if prior else None)
        if answer.not_modified:
            headers = answer.headers
            if prior is not None and "link" not in headers and prior.link:
                headers = httpx.Headers({**headers, "link": prior.link})
            _see(listing, prior.newest_updated_at if prior else None)
            oldest = prior.oldest_updated_at if prior else None
            stop = (page_no == 1 and own.trust_304) or _crossed(listing, oldest)
            return Page(answer.url, headers, None, page_no, not_modified=True, stop=stop)
        paginator = listing.paginator
        assert paginator is not None
        items = paginator.items(answer.data)
        now = datetime.now(UTC)
        stamps: list[datetime] = []
        for n, item in enumerate(items):
            try:
                pr = PullRequest.from_api(own.repo, item, run_id=own.opts.run_id, fetched_at=now)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                # an answer that is not GitHub's pull request: this listing stops, the run
                # goes on (errors are data)
                what = f"no {exc}" if isinstance(exc, KeyError) else f"{type(exc).__name__}"
                raise MalformedPageError(
                    f"{answer.url}: item {n} is not a pull request ({what})", url=answer.url
                ) from None
            if pr.updated_at is not None:
                stamps.append(pr.updated_at)
            old = own.pulls.get(pr.number)
            if old is not None:
                own.duplicates += 1
            if old is None or (pr.updated_at or now) >= (old.updated_at or now):
                own.pulls[pr.number] = pr
                own.records[pr.number] = item
        newest, oldest = (max(stamps), min(stamps)) if stamps else (None, None)
        _see(listing, newest)
        own.pages.append(
            PageRecord(
                repo=own.repo,
                state=own.opts.state,
                per_page=listing.page_size,
                page=page_no,
                url=answer.url,
                etag=answer.etag,
                link=answer.headers.get("link"),
                items=len(items),
                newest_updated_at=newest,
                oldest_updated_at=oldest,
                run_id=own.opts.run_id,
                fetched_at=now,
            )
        )
        return Page(
            answer.url, answer.headers, answer.data, page_no, items, stop=_crossed(listing, oldest)
        )

    async def probe(self, gh: RestClient, listing: Listing) -> list[str] | None:
        """With a planner: page 1 with one item, the listing's size and the host's latency
        for the planner; sets the planned page size and returns the URLs of pages 2.. at
        it, or None (the listing's outcome set) when the probe failed as a first page
        would (``walk``). Without one: no known pages."""
        own: RepoListing = listing.own
        planner, paginator = own.opts.planner, listing.paginator
        if planner is None:
            return []
        assert paginator is not None
        # page 1 at two sizes at once: the one-item answer's rel="last" is the listing's
        # exact size; the two latencies tell a page's fixed time from its time per item
        answers = await probe_page_one(
            listing,
            planner,
            lambda size: gh.get(
                pulls_url(own.repo, own.opts.state, size), label=own.repo, paced=False
            ),
            paginator,
            selector="",  # a page is the list of pull requests
            parallel=True,
        )
        if answers is None:
            return None
        answer = answers[0]
        return paginator.sized_urls(answer.url, answer.headers, answer.data, listing.page_size)

    async def close(self, gh: RestClient, listing: Listing) -> None:
        """After the paging loop. Pages are read concurrently, so a pull request opened or
        updated meanwhile (it moves to page 1) shifts the others down one place: a page
        read after the shift repeats an item, and one read before an earlier page shifts
        loses one. So a sync that read more than page 1 asks page 1 again with its ETag at
        the end: unless it is unchanged (a 304, free of the budget), the sync is not
        complete, the watermark stays, and the next run reads the listing again
        (unchanged pages answer 304). The pull requests read are staged meanwhile
        (``SyncOptions.stage_rows``): that look is one round trip of waiting."""
        own: RepoListing = listing.own
        if not (listing.complete and listing.pages > 1):
            return
        look = asyncio.ensure_future(self._listing_moved(gh, listing))
        try:
            if own.opts.stage_rows is not None and own.pulls:
                await own.opts.stage_rows(self.result(gh, listing, quiet=True))
                own.rows_staged = True
            moved = await look
        except RateLimitStop as exc:  # the budget ran out just before the check
            listing.complete, listing.stop_reason = False, str(exc)
            return
        finally:
            look.cancel()
        if moved:
            listing.complete, listing.stop_reason = False, LISTING_MOVED

    async def _listing_moved(self, gh: RestClient, listing: Listing) -> bool:
        own: RepoListing = listing.own
        answer = await gh.get(
            self.first_url(listing), label=own.repo, etag=own.first_etag, paced=False
        )
        return not answer.not_modified

    async def done(self, gh: RestClient, listing: Listing) -> None:
        """The repository's result, stored (``on_result``) as its listing ends; terminal
        errors for it (404, other 4xx) become ``RepoResult.error``."""
        result = self.result(gh, listing)
        if listing.error is not None:
            result.error, result.error_kind = listing.error, listing.error_kind
        listing.own.result = result
        if self.on_result is not None:
            await self.on_result(result)

    def result(self, gh: RestClient, listing: Listing, *, quiet: bool = False) -> RepoResult:
        own: RepoListing = listing.own
        if own.duplicates and not quiet:
            log.warning(
                "%s: %d pull requests appeared on two pages (the list changed while it was read)",
                own.repo,
                own.duplicates,
            )
        complete = listing.complete and listing.error is None
        stop = listing.error or listing.stop_reason
        watermark, newest = listing.watermark, listing.newest
        if complete and newest is not None and (watermark is None or newest > watermark):
            watermark = newest
        mine = [r for r in gh.requests if r.repo == own.repo]
        sync = SyncRecord(
            repo=own.repo,
            state=own.opts.state,
            per_page=listing.page_size,
            watermark=watermark,
            complete=complete,
            stop_reason=redact(stop) if stop else None,
            pages=listing.pages,
            requests=len(mine),
            # every 304 of the repository, as the run's total counts them (the paging
            # loop's own count leaves out the final look at page 1)
            not_modified=sum(1 for r in mine if r.status == 304),
            items=len(own.pulls),
            failed_pages=listing.failed,
            run_id=own.opts.run_id,
            started_at=listing.started,
            ended_at=datetime.now(UTC),
        )
        return RepoResult(
            repo=own.repo,
            sync=sync,
            pulls=list(own.pulls.values()),
            records=[own.records[n] for n in own.pulls],
            pages=own.pages,
            requests=mine,
            rows_staged=own.rows_staged,
        )

    def summary(
        self, gh: RestClient, listings: Sequence[Listing], shared: SharedLimits | None = None
    ) -> GitHubSummary:
        """The run's summary: per repository, and what is GitHub's own."""
        results = [x.own.result for x in listings if x.own is not None and x.own.result]
        summary = GitHubSummary(run_id=gh.run_id)
        summary.repos = [summarize_result(r) for r in results]
        summary.pulls = summary.records = sum(len(r.pulls) for r in results)
        gh.tally(summary)
        summary.not_modified = sum(1 for r in gh.requests if r.status == 304)
        summary.budget_spent = sum(
            1 for r in gh.requests if r.repo and r.status is not None and r.status != 304
        )
        summary.per_page = max((r.sync.per_page for r in results), default=self.per_page)
        if self.planner is not None and self.planner.plan is not None:
            summary.size_plan = self.planner.plan.describe()
            summary.size_plan_figures = self.planner.plan.figures()
        summary.failed_pages = sum(r.sync.failed_pages for r in results)
        stops = {r.sync.stop_reason for r in results if r.sync.stop_reason and not r.error}
        summary.stopped = "; ".join(sorted(stops)) or None
        summary.errors = [(r.repo, r.error) for r in results if r.error]
        if shared is not None:
            summary.shared_limit = shared.slots.name
            summary.shared_round_trips = shared.round_trips
        if self.location is not None:
            summary.schema_changes = store.staged_schema_changes(
                self.location, gh.run_id, store.is_pull_table
            )
        return summary


def _see(listing: Listing, stamp: datetime | None) -> None:
    if stamp is not None and (listing.newest is None or stamp > listing.newest):
        listing.newest = stamp


def _crossed(listing: Listing, oldest: datetime | None) -> bool:
    return listing.watermark is not None and oldest is not None and oldest < listing.watermark


def summarize_result(result: RepoResult) -> dict[str, Any]:
    s = result.sync
    return {
        "repo": s.repo,
        "complete": s.complete,
        "pull_requests": s.items,
        "pages": s.pages,
        "requests": s.requests,
        "not_modified": s.not_modified,
        "failed_pages": s.failed_pages,
        "watermark": s.watermark.isoformat() if s.watermark else None,
        "stop_reason": s.stop_reason,
        "error": result.error,
    }
