"""Incremental, concurrent paging of GitHub's pull-request list.

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
   own is in ``_RepoSync.fetch`` (ETags, the watermark, pull-request rows).
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
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from ingest.github.client import GitHubClient, safe_url
from ingest.github.errors import (
    BadCredentialsError,
    GitHubTerminalError,
    PageError,
    RateLimitStop,
)
from ingest.github.records import PageRecord, PullRequest, RepoResult, RepoState, SyncRecord
from ingest.redact import redact
from ingest.rest.engine import Page, walk
from ingest.rest.paging import LinkHeaderPaginator, Paginator
from ingest.rest.sizing import PER_PAGE_MAX as PER_PAGE_MAX
from ingest.rest.sizing import PROBE_SIZE, SizePlanner
from ingest.rest.sizing import choose_per_page as choose_per_page
from ingest.rest.sizing import estimate_seconds as estimate_seconds

log = logging.getLogger(__name__)

REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def check_repo(repo: str) -> str:
    if not REPO_NAME.match(repo):
        raise ValueError(f"repository must look like owner/name, got {repo!r}")
    return repo


def pulls_url(repo: str, state: str, per_page: int) -> str:
    """The first page's URL, relative to the client's base URL."""
    return f"repos/{repo}/pulls?state={state}&sort=updated&direction=desc&per_page={per_page}"


# --------------------------------------------------------------------------- one repository


@dataclass(slots=True)
class SyncOptions:
    state: str
    per_page: int  # with a planner: until the plan is made (and if the probe fails)
    full_refresh: bool
    run_id: str
    concurrency: int
    planner: SizePlanner | None = None  # the page size is planned after a probe


LISTING_MOVED = (
    "the listing changed while it was read (pull requests opened or updated meanwhile); "
    "the next run reads it again"
)


class _RepoSync:
    """The state of one repository's sync within a run."""

    def __init__(
        self, gh: GitHubClient, repo: str, opts: SyncOptions, prior: RepoState, paginator: Paginator
    ) -> None:
        self.gh, self.repo, self.opts, self.paginator = gh, repo, opts, paginator
        self.stored = {} if opts.full_refresh else prior.pages
        self.watermark = None if opts.full_refresh else prior.watermark
        self.trust_304 = (
            not opts.full_refresh and prior.last_complete and prior.watermark is not None
        )
        self.pulls: dict[int, PullRequest] = {}
        self.pages: list[PageRecord] = []
        self.newest: datetime | None = None
        self.page_count = self.not_modified = self.failed = self.duplicates = 0
        self.first_etag: str | None = None
        self.started = datetime.now(UTC)

    async def fetch(self, url: str, page_no: int) -> Page:
        """One page, for the paging loop: its items become pull requests and a page record;
        ``stop`` when it reaches the watermark, or when page 1 is unchanged since a
        complete sync (for a 304, the stored ``Link`` header stands in)."""
        prior = self.stored.get(safe_url(self.gh.http.base_url.join(url)))
        answer = await self.gh.get(url, label=self.repo, etag=prior.etag if prior else None)
        self.page_count += 1
        if page_no == 1:
            self.first_etag = answer.etag or (prior.etag if prior else None)
        if answer.not_modified:
            self.not_modified += 1
            headers = answer.headers
            if prior is not None and "link" not in headers and prior.link:
                headers = httpx.Headers({**headers, "link": prior.link})
            self._see(prior.newest_updated_at if prior else None)
            oldest = prior.oldest_updated_at if prior else None
            stop = (page_no == 1 and self.trust_304) or self.crossed(oldest)
            return Page(answer.url, headers, None, page_no, not_modified=True, stop=stop)
        items = self.paginator.items(answer.data)
        now = datetime.now(UTC)
        stamps: list[datetime] = []
        for item in items:
            pr = PullRequest.from_api(self.repo, item, run_id=self.opts.run_id, fetched_at=now)
            if pr.updated_at is not None:
                stamps.append(pr.updated_at)
            old = self.pulls.get(pr.number)
            if old is not None:
                self.duplicates += 1
            if old is None or (pr.updated_at or now) >= (old.updated_at or now):
                self.pulls[pr.number] = pr
        newest, oldest = (max(stamps), min(stamps)) if stamps else (None, None)
        self._see(newest)
        self.pages.append(
            PageRecord(
                repo=self.repo,
                state=self.opts.state,
                per_page=self.opts.per_page,
                page=page_no,
                url=answer.url,
                etag=answer.etag,
                link=answer.headers.get("link"),
                items=len(items),
                newest_updated_at=newest,
                oldest_updated_at=oldest,
                run_id=self.opts.run_id,
                fetched_at=now,
            )
        )
        return Page(
            answer.url, answer.headers, answer.data, page_no, items, stop=self.crossed(oldest)
        )

    def _see(self, stamp: datetime | None) -> None:
        if stamp is not None and (self.newest is None or stamp > self.newest):
            self.newest = stamp

    def crossed(self, oldest: datetime | None) -> bool:
        return self.watermark is not None and oldest is not None and oldest < self.watermark

    async def run(self) -> tuple[bool, str | None]:
        """Page the listing; returns (complete, why it stopped early).

        Pages are read concurrently, so a pull request opened or updated meanwhile
        (it moves to page 1) shifts the others down one place: a page read after
        the shift repeats an item, and one read before an earlier page shifts loses
        one. So a sync that read more than page 1 asks page 1 again with its ETag at
        the end: unless it is unchanged (a 304, free of the budget), the sync is not
        complete, the watermark stays, and the next run reads the listing again
        (unchanged pages answer 304).
        """
        complete, stop = await self._page()
        if complete and self.page_count > 1:
            try:
                moved = await self._listing_moved()
            except RateLimitStop as exc:  # the budget ran out just before the check
                return False, str(exc)
            if moved:
                return False, LISTING_MOVED
        return complete, stop

    async def _listing_moved(self) -> bool:
        first = pulls_url(self.repo, self.opts.state, self.opts.per_page)
        answer = await self.gh.get(first, label=self.repo, etag=self.first_etag, paced=False)
        return not answer.not_modified

    async def _page(self) -> tuple[bool, str | None]:
        known: list[str] = []
        if self.opts.planner is not None:
            probed = await self._probe(self.opts.planner)
            if isinstance(probed, tuple):
                return probed
            known = probed
        first = pulls_url(self.repo, self.opts.state, self.opts.per_page)
        done = await walk(
            self.fetch,
            first,
            self.paginator,
            incremental=self.watermark is not None,
            max_wave=self.opts.concurrency,
            label=self.repo,
            known=known,
        )
        self.failed += done.failed
        return done.complete, done.stop_reason

    async def _probe(self, planner: SizePlanner) -> list[str] | tuple[bool, str | None]:
        """Page 1 with one item: the listing's size and the host's latency for the
        planner; sets the planned page size and returns the URLs of pages 2.. at it, or
        (False, why) when the probe failed as a first page would (``walk``)."""
        reported = False
        try:
            answer = await self.gh.get(
                pulls_url(self.repo, self.opts.state, PROBE_SIZE), label=self.repo, paced=False
            )
            total = self.paginator.total_items(answer.url, answer.headers, answer.data)
            reported = True
            self.opts.per_page = await planner.size_for(
                total, len(self.paginator.items(answer.data)), answer.seconds
            )
        except RateLimitStop as exc:
            return False, str(exc)
        except PageError as exc:
            self.failed += 1
            return False, f"page failed: {exc}"
        finally:
            if not reported:
                planner.leave()
        return self.paginator.sized_urls(
            answer.url, answer.headers, answer.data, self.opts.per_page
        )

    def result(self, complete: bool, stop: str | None) -> RepoResult:
        if self.duplicates:
            log.warning(
                "%s: %d pull requests appeared on two pages (the list changed while it was read)",
                self.repo,
                self.duplicates,
            )
        watermark = self.watermark
        if complete and self.newest is not None and (watermark is None or self.newest > watermark):
            watermark = self.newest
        mine = [r for r in self.gh.requests if r.repo == self.repo]
        sync = SyncRecord(
            repo=self.repo,
            state=self.opts.state,
            per_page=self.opts.per_page,
            watermark=watermark,
            complete=complete,
            stop_reason=redact(stop) if stop else None,
            pages=self.page_count,
            requests=len(mine),
            not_modified=self.not_modified,
            items=len(self.pulls),
            failed_pages=self.failed,
            run_id=self.opts.run_id,
            started_at=self.started,
            ended_at=datetime.now(UTC),
        )
        return RepoResult(
            repo=self.repo,
            sync=sync,
            pulls=list(self.pulls.values()),
            pages=self.pages,
            requests=mine,
        )


async def sync_repo(
    gh: GitHubClient,
    repo: str,
    opts: SyncOptions,
    prior: RepoState | None = None,
    paginator: Paginator | None = None,
) -> RepoResult:
    """Sync one repository. Terminal errors for this repository (404, other 4xx)
    become ``RepoResult.error``; a rejected token (401) is raised."""
    sync = _RepoSync(gh, repo, opts, prior or RepoState(), paginator or LinkHeaderPaginator())
    try:
        complete, stop = await sync.run()
    except BadCredentialsError:
        raise
    except GitHubTerminalError as exc:
        result = sync.result(False, str(exc))
        result.error, result.error_kind = str(exc), type(exc).__name__
        return result
    return sync.result(complete, stop)


async def sync_repos(
    gh: GitHubClient,
    repos: Sequence[str],
    opts_for: Callable[[str], SyncOptions],
    priors: dict[str, RepoState],
    on_result: Callable[[RepoResult], Awaitable[None]] | None = None,
) -> list[RepoResult]:
    """Sync every repository concurrently; ``on_result`` stores each as it ends."""

    async def one(repo: str) -> RepoResult:
        result = await sync_repo(gh, repo, opts_for(repo), priors.get(repo))
        if on_result is not None:
            await on_result(result)
        return result

    tasks = [asyncio.ensure_future(one(r)) for r in repos]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for t in tasks:
            t.cancel()


async def probe_rate_limit(gh: GitHubClient) -> int | None:
    """Remaining primary budget from ``GET /rate_limit`` (which GitHub does not count);
    None when rate limiting is disabled (the endpoint answers 404)."""
    try:
        answer = await gh.get("rate_limit")
    except BadCredentialsError:
        raise
    except GitHubTerminalError:  # 404: rate limiting is disabled on this server
        gh.governor.unlimited = True
        return None
    except PageError:  # unknown; the governor learns the budget from the first answer
        return None
    core = ((answer.data or {}).get("resources") or {}).get("core") or {}
    remaining = core.get("remaining")
    return int(remaining) if remaining is not None else None


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
