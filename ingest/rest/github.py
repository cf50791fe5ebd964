"""The GitHub dialect of the REST engine: what is GitHub's own, switched on by a source
file's ``client.dialect: github`` (``sources/github.yaml``; ``ingest github --repo``
builds the same source from its options, ``github_source``). ``ingest.rest.run``
gives it the source's client (window, governor, retries, shared limits) and stores
what the host allowed; the dialect pages each repository.

What the dialect adds to the declared source's client and paging loop
(``ingest.rest.engine.walk``):

* GitHub's headers (``Accept``, ``X-GitHub-Api-Version``) and an optional token
  (unauthenticated: 60 requests an hour);
* stored page ETags sent back as ``If-None-Match`` (a 304 is free of the budget);
* the free ``GET /rate_limit`` probe and budget-sized pages (a one-item probe per
  repository and ``ingest.rest.sizing.SizePlanner``);
* its tables: ``pull_requests`` (its fixed columns, its ``key``, then the typed, flattened
  columns of the rest of each pull request, evolving as the REST resource tables' do:
  ``ingest.rest.typed``, ``ingest.storage.evolve``; its nested lists are child tables,
  ``pull_requests__labels`` ..., replaced per pull request), ``github_pages`` (the ETags) and
  ``github_syncs`` (the ``updated_at`` watermark), one part per run and repository.

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
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from pydantic import ValidationError

from ingest import __version__
from ingest.redact import redact, register_secret
from ingest.rest import store
from ingest.rest.auth import Credentials, SecretLoader, resolve
from ingest.rest.client import RestClient, safe_url
from ingest.rest.engine import Page, walk
from ingest.rest.errors import AuthError, PageError, RateLimitStop, RestTerminalError, SourceError
from ingest.rest.paging import LinkHeaderPaginator, Paginator
from ingest.rest.ratelimit import RateLimitGovernor
from ingest.rest.records import (
    GitHubSummary,
    PageRecord,
    PullRequest,
    RepoResult,
    RepoState,
    SyncRecord,
)
from ingest.rest.sizing import PER_PAGE_MAX as PER_PAGE_MAX
from ingest.rest.sizing import PROBE_SIZE, LatencyModel, SizePlanner
from ingest.rest.sizing import choose_per_page as choose_per_page
from ingest.rest.sizing import estimate_seconds as estimate_seconds
from ingest.rest.source import Source
from ingest.rest.window import AdaptiveWindow
from ingest.settings import Settings

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
HEADERS = {
    "Accept": "application/vnd.github+json",
    "X-GitHub-Api-Version": API_VERSION,
    "User-Agent": f"nightly-ingest/{__version__}",
}
AUTH_HINT = "the token may be wrong or expired: check the GITHUB_TOKEN variable or the Secret block"
WHO = "this token (private repositories need a token with access)"
# The tables a run of the dialect writes, which its runs keep trimmed and compacted.
TABLES = ("pull_requests", "pull_request_log", "api_requests", "github_pages", "github_syncs")


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
    # stages the pull requests (store.write_pull_rows) while page 1 is looked at again
    stage_rows: Callable[[RepoResult], Awaitable[None]] | None = None


LISTING_MOVED = (
    "the listing changed while it was read (pull requests opened or updated meanwhile); "
    "the next run reads it again"
)


class _RepoSync:
    """The state of one repository's sync within a run."""

    def __init__(
        self, gh: RestClient, repo: str, opts: SyncOptions, prior: RepoState, paginator: Paginator
    ) -> None:
        self.gh, self.repo, self.opts, self.paginator = gh, repo, opts, paginator
        self.stored = {} if opts.full_refresh else prior.pages
        self.watermark = None if opts.full_refresh else prior.watermark
        self.trust_304 = (
            not opts.full_refresh and prior.last_complete and prior.watermark is not None
        )
        self.pulls: dict[int, PullRequest] = {}
        self.records: dict[int, dict[str, Any]] = {}  # as the API gave them
        self.pages: list[PageRecord] = []
        self.newest: datetime | None = None
        self.page_count = self.not_modified = self.failed = self.duplicates = 0
        self.first_etag: str | None = None
        self.rows_staged = False
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
                self.records[pr.number] = item
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
        (unchanged pages answer 304). The pull requests read are staged meanwhile
        (``SyncOptions.stage_rows``): that look is one round trip of waiting.
        """
        complete, stop = await self._page()
        if complete and self.page_count > 1:
            look = asyncio.ensure_future(self._listing_moved())
            try:
                await self._stage_rows()
                moved = await look
            except RateLimitStop as exc:  # the budget ran out just before the check
                return False, str(exc)
            finally:
                look.cancel()
            if moved:
                return False, LISTING_MOVED
        return complete, stop

    async def _stage_rows(self) -> None:
        """The pull requests read so far, staged ahead of the rest of the result."""
        if self.opts.stage_rows is None or not self.pulls:
            return
        await self.opts.stage_rows(self.result(True, None, quiet=True))
        self.rows_staged = True

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

    def result(self, complete: bool, stop: str | None, *, quiet: bool = False) -> RepoResult:
        if self.duplicates and not quiet:
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
            # every 304 of the repository, as the run's total counts them (the paging
            # loop's own count leaves out the final look at page 1)
            not_modified=sum(1 for r in mine if r.status == 304),
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
            records=[self.records[n] for n in self.pulls],
            pages=self.pages,
            requests=mine,
            rows_staged=self.rows_staged,
        )


async def sync_repo(
    gh: RestClient,
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
    except AuthError:
        raise
    except RestTerminalError as exc:
        result = sync.result(False, str(exc))
        result.error, result.error_kind = str(exc), type(exc).__name__
        return result
    return sync.result(complete, stop)


async def sync_repos(
    gh: RestClient,
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


async def probe_rate_limit(gh: RestClient) -> int | None:
    """Remaining primary budget from ``GET /rate_limit`` (which GitHub does not count);
    None when rate limiting is disabled (the endpoint answers 404)."""
    try:
        answer = await gh.get("rate_limit")
    except AuthError:
        raise
    except RestTerminalError:  # 404: rate limiting is disabled on this server
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


# --------------------------------------------------------------------------- the source


def github_source(
    settings: Settings,
    repos: Sequence[str],
    *,
    state: str | None = None,
    per_page: int | None = None,
    concurrency: int | None = None,
    base_url: str | None = None,
    token_block: str | None = None,
    rate_limit_reserve: int | None = None,
    max_wait: float | None = None,
) -> Source:
    """The source ``ingest github --repo`` and the ``github-pulls`` flow run: the pull
    requests of ``repos``, declared as a source file would declare them, with the
    ``github_*`` settings as the defaults of what is not given."""
    auth = {
        "type": "bearer",
        **({"secret": token_block} if token_block else {"env": "GITHUB_TOKEN"}),
    }
    declared = {
        "name": "github",
        "repos": list(dict.fromkeys(repos)),
        "client": {
            "dialect": "github",
            "base_url": base_url or settings.github.base_url,
            "auth": auth,
            "paginator": {
                "type": "header_link",
                "page_size": per_page or settings.github.per_page or "auto",
                "page_size_param": "per_page",
            },
            "concurrency": concurrency or settings.github.concurrency,
            "rate_limit": {
                "reserve": settings.github.rate_limit_reserve
                if rate_limit_reserve is None
                else rate_limit_reserve,
                "max_wait": settings.github.max_wait if max_wait is None else max_wait,
                "backoff": settings.github.secondary_backoff,
            },
        },
        "resources": [
            {
                "name": "pulls",
                "table_name": "pull_requests",
                "endpoint": {
                    "path": "repos/{repo}/pulls",
                    "params": {
                        "state": state or settings.github.state,
                        "sort": "updated",
                        "direction": "desc",
                    },
                },
            }
        ],
    }
    try:
        return Source.model_validate(declared)
    except ValidationError as exc:  # a bad repository name, state ...: one clear line each
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'options'}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        ]
        raise SourceError("; ".join(problems)) from exc


def state_of(source: Source) -> str:
    """The pull requests a dialect source lists: open, closed or all."""
    return str(source.resources[0].endpoint.params.get("state", "all"))


def per_page_of(source: Source) -> int | None:
    """The declared page size; None when automatic."""
    spec = source.resolved(source.resources[0]).endpoint.paginator
    size = spec.page_size if spec is not None else None
    return size if isinstance(size, int) else None


def github_token(
    source: Source, settings: Settings, load_block: SecretLoader | None = None
) -> str | None:
    """The token: the Secret block the source names, else its variable (``GITHUB_TOKEN``),
    else ``INGEST_GITHUB_TOKEN``; None means unauthenticated (60 requests an hour)."""
    auth = source.client.auth
    token: str | None = None
    if auth is not None and auth.secret:
        token = resolve(auth, load_block)
    elif auth is not None and auth.env and os.environ.get(auth.env):
        token = os.environ[auth.env]
    elif (own := settings.own_secret("github.token")) is not None:
        token = own.get_secret_value()  # this worker's INGEST_GITHUB_TOKEN
    register_secret(token)
    return token or None


def credentials(
    source: Source,
    settings: Settings,
    load_block: SecretLoader | None = None,
    token: str | None = None,
) -> Credentials:
    """The ``Authorization`` header of the token (none without one), to the API's host only."""
    token = token or github_token(source, settings, load_block)
    register_secret(token)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Credentials(headers=headers, hint=AUTH_HINT)


def unstored(client: RestClient) -> list[Any]:
    """Requests that belong to no repository (the ``/rate_limit`` probe); each
    repository's own are staged with its result."""
    return [r for r in client.requests if not r.repo]


# --------------------------------------------------------------------------- one run


def planner_for(
    settings: Settings, listings: int, window: AdaptiveWindow, governor: RateLimitGovernor
) -> SizePlanner:
    """The page-size planner of the repositories whose size is automatic: the configured
    latency model (scaled by the probes), the window's model, and the share of the
    budget above the reserve (``github_budget_share``) as it stands once they answered."""

    def budget() -> int | None:
        if governor.unlimited or governor.budget is None:
            return None
        above = max(0, governor.budget.remaining - governor.pending - governor.effective_reserve)
        return max(1, int(above * settings.github.budget_share))

    return SizePlanner(
        listings,
        latency=LatencyModel(settings.github.latency_base, settings.github.latency_per_item),
        finish=window.finish_seconds,
        budget=budget,
        expected=settings.github.expected_pulls,
        recheck=True,
    )


async def run_repos(
    settings: Settings,
    source: Source,
    gh: RestClient,
    *,
    run_id: str,
    priors: dict[str, RepoState],
    full_refresh: bool,
) -> GitHubSummary:
    """Sync every repository of ``source`` through ``gh`` and store each as it ends.

    Raises ``AuthError`` (401) at once; every other outcome is in the summary (per
    repository: complete or why it stopped, errors such as 404)."""
    started = time.perf_counter()
    window, governor = gh.window, gh.governor
    assert window is not None
    repos, state, fixed = list(source.repos), state_of(source), per_page_of(source)
    summary = GitHubSummary(run_id=run_id)
    auto_for = [r for r in repos if not fixed and (full_refresh or priors[r].per_page is None)]
    planner: SizePlanner | None = None
    # Fewer such repositories than the window admits at once: their first pages would
    # leave it idle for a page's latency, so each is probed (page 1 with one pull
    # request) and all are sized together from what the probes showed
    # (ingest.rest.sizing). More of them fill the window with first pages anyway: their
    # size is chosen up front, for the budget GET /rate_limit (free) shows.
    if auto_for and len(auto_for) < window.size:
        planner = planner_for(settings, len(auto_for), window, governor)
    budget = None
    if auto_for and planner is None:
        remaining = await probe_rate_limit(gh)
        if remaining is not None:
            above = max(0, remaining - governor.effective_reserve)
            budget = max(1, int(above * settings.github.budget_share))
    # Up front (and for a repository whose probe fails): sized for the host's known
    # ceiling, else the initial window, not for the cap: a cap it may never reach asks
    # for small pages and many requests; see AdaptiveWindow.plan_size.
    auto = (
        choose_per_page(
            [priors[r].stored_items or settings.github.expected_pulls for r in auto_for],
            concurrency=window.plan_size(settings.http.initial_window),
            budget=budget,
            base_s=settings.github.latency_base,
            per_item_s=settings.github.latency_per_item,
        )
        if auto_for
        else PER_PAGE_MAX
    )

    def opts_for(repo: str) -> SyncOptions:
        kept = None if full_refresh else priors[repo].per_page
        return SyncOptions(
            state=state,
            per_page=fixed or kept or auto,
            full_refresh=full_refresh,
            run_id=run_id,
            concurrency=gh.concurrency,
            planner=planner if planner is not None and repo in auto_for else None,
            stage_rows=stage_rows,
        )

    async def stage_rows(result: RepoResult) -> None:
        await asyncio.to_thread(store.write_pull_rows, settings.location, run_id, result)

    async def on_result(result: RepoResult) -> None:
        await asyncio.to_thread(store.write_repo_result, settings.location, run_id, result)

    results = await sync_repos(gh, repos, opts_for, priors, on_result)
    summary.repos = [summarize_result(r) for r in results]
    summary.pulls = summary.records = sum(len(r.pulls) for r in results)
    summary.requests = len(gh.requests)
    summary.not_modified = sum(1 for r in gh.requests if r.status == 304)
    summary.budget_spent = sum(
        1 for r in gh.requests if r.repo and r.status is not None and r.status != 304
    )
    summary.per_page = max((r.sync.per_page for r in results), default=fixed or auto)
    if planner is not None and planner.plan is not None:
        summary.size_plan = planner.plan.describe()
    summary.failed_pages = sum(r.sync.failed_pages for r in results)
    stops = {r.sync.stop_reason for r in results if r.sync.stop_reason and not r.error}
    summary.stopped = "; ".join(sorted(stops)) or None
    summary.errors = [(r.repo, r.error) for r in results if r.error]
    summary.max_in_flight = gh.max_in_flight
    summary.window, summary.ceiling = window.remembered()
    summary.limit_answers = sum(1 for r in gh.requests if r.status in (403, 429))
    summary.seconds = time.perf_counter() - started
    return summary


def merge_summaries(run_id: str, parts: Sequence[GitHubSummary]) -> GitHubSummary:
    """One summary of a run whose repositories were fetched by several calls (tasks on
    a cluster): counts add up; ``max_in_flight`` is the most one call had in flight
    (the host's own count is the cluster's); the window is the smallest one remembered."""
    if len(parts) == 1:
        return parts[0]
    out = GitHubSummary(run_id=run_id)
    for s in parts:
        out.repos += s.repos
        out.errors += s.errors
        out.pulls += s.pulls
        out.records += s.records
        out.requests += s.requests
        out.not_modified += s.not_modified
        out.budget_spent += s.budget_spent
        out.failed_pages += s.failed_pages
        out.limit_answers += s.limit_answers
        out.shared_round_trips += s.shared_round_trips
        out.per_page = max(out.per_page, s.per_page)
        out.size_plan = "; ".join(p for p in (out.size_plan, s.size_plan) if p) or None
        out.max_in_flight = max(out.max_in_flight, s.max_in_flight)
        out.shared_limit = out.shared_limit or s.shared_limit
        for change in s.schema_changes:  # a part sees the parts staged before it: once each
            if change not in out.schema_changes:
                out.schema_changes.append(change)
    stops = {reason for s in parts if s.stopped for reason in s.stopped.split("; ")}
    out.stopped = "; ".join(sorted(stops)) or None
    out.window = min((s.window for s in parts), default=0)
    ceilings = [s.ceiling for s in parts if s.ceiling is not None]
    out.ceiling = min(ceilings) if ceilings else None
    return out
