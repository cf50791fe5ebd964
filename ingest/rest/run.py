"""One run of a declared REST source: every resource, parents before children, each
listing paged by the one paging loop (``ingest.rest.engine.walk``) through one
client per source (one host, one adaptive window, one rate-limit governor).

For each resource, in the order declared:

* a resource without a parent is one listing; a child (``{resources.P.F}`` in
  its path or parameters) is one listing per parent record: those fetched in
  this run and those stored by earlier runs, all concurrently (the window
  decides how many requests are in flight);
* a page's records are read at ``data_selector``; a page without them, a
  record without its primary key, or a cursor that repeats stops that
  listing with a clear error (``MalformedPageError``), never a loop;
* with ``incremental``, the watermark of the listing's last complete sync is
  sent as ``start_param``, or, for a listing sorted newest first
  (``row_order: desc``), paging stops at the first page older than it; the
  watermark advances only when the listing completes;
* rows are staged per listing into the resource's table, upserted by key at
  the run's commit.

The window the host allowed is remembered (``api_windows``) for the next run.

One class pages every source: ``SourceRun``, through the hooks of its run
(``ingest.rest.dialect.Run``): the engine's own (``ingest.rest.plain``), or those of the
dialect object the caller handed in (``fetch_source``'s ``dialect``; this module never
imports a dialect's). GitHub's (``client.dialect: github``) is one listing per
repository, paged by the same ``SourceRun._list`` (its state on the same ``Listing``:
page size, page and failure counts, watermark, newest stamp, outcome; the same
terminal-error handling; the same walk) with its hooks where GitHub differs:

* ``open``: the listing's start from the stored state (watermark, stored page ETags,
  the page size planned for the run by ``github.plan``);
* ``probe`` before the walk: page 1 at two sizes at once, then ``SizePlanner``'s plan
  from the measured latency, which gives the walk its known pages;
* ``fetch``: the page with its stored ETag as ``If-None-Match`` (a 304 stands in for
  the stored page; page 1 unchanged after a complete sync stops the listing), its
  items as ``PullRequest`` rows and a ``github_pages`` record;
* ``close`` after the walk: page 1 asked again ("listing moved"), the rows staged
  meanwhile;
* ``done``: the repository's ``RepoResult`` (``github_syncs`` row ...) stored as its
  listing ends, where a declared source's listings are staged at the end of the run.

Why hooks rather than a second run class: the listing loop (start, walk, outcome,
errors, concurrency of listings) was the same in both; what differs is what a page is
read into and what is stored, which a dialect object supplies without a copy of the loop.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from ingest.errors import TerminalError
from ingest.redact import redact
from ingest.rest import store
from ingest.rest.aio import run_async
from ingest.rest.auth import SecretLoader
from ingest.rest.client import RestClient
from ingest.rest.config import RestConfig
from ingest.rest.dialect import PLAIN, Dialect, Run, RunStart
from ingest.rest.engine import Listing, Page, walk
from ingest.rest.errors import AuthError
from ingest.rest.paging import AutoPaginator
from ingest.rest.plain import PlainRun, size_param
from ingest.rest.ratelimit import RateLimitGovernor
from ingest.rest.records import HostWindow, RestSummary
from ingest.rest.shared import SharedLimits, with_shared_limits
from ingest.rest.source import Resource, Source, fill_placeholders
from ingest.rest.spec import make_paginator
from ingest.rest.transport import make_http, warm_up
from ingest.rest.window import AdaptiveWindow


class SourceRun:
    """The state of one run of one source."""

    def __init__(
        self,
        config: RestConfig,
        source: Source,
        client: RestClient,
        state: store.SourceState,
        *,
        run_id: str,
        full_refresh: bool,
        hooks: Run | None = None,
    ) -> None:
        self.config, self.source, self.client = config, source, client
        self.state, self.run_id, self.full_refresh = state, run_id, full_refresh
        # a dialect's hooks, else the engine's own paging (the plain dialect's)
        self.hooks: Run = hooks if hooks is not None else PlainRun(self)
        self.listings: dict[str, list[Listing]] = {}

    # ------------------------------------------------------------------ resources

    async def run(self) -> None:
        for declared in self.source.resources:
            resource = self.source.resolved(declared)
            table = self.source.table(resource)
            parent = resource.parent
            listings = self.hooks.listings(resource, table)
            if listings is None:
                listings = (
                    [Listing(resource, table)]
                    if parent is None
                    else self._children(resource, table, parent[0])
                )
            self.listings[resource.name] = listings
            if isinstance(self.hooks, PlainRun):
                self.hooks.prepare(resource, listings)
            await _together([self._list(x) for x in listings])
            await self.hooks.resource_done(resource, table, listings)

    def _children(self, resource: Resource, table: str, parent_name: str) -> list[Listing]:
        """One listing per parent record: fetched now, or stored by an earlier run."""
        parent = next(r for r in self.source.resources if r.name == parent_name)
        parents = dict(store.stored_records(self.config.location, self.source.table(parent)))
        for listing in self.listings.get(parent_name, []):
            parents.update(listing.records)
        return [
            Listing(
                resource, table, parent_key=key, parent=record, path=self.path_of(resource, record)
            )
            for key, record in sorted(parents.items())
        ]

    def path_of(self, resource: Resource, parent: dict[str, Any] | None) -> str:
        assert resource.endpoint.path is not None
        try:
            return fill_placeholders(resource.endpoint.path, parent, quote_it=True)
        except KeyError as exc:
            return f"!missing:{exc.args[0]}"

    # ------------------------------------------------------------------ one listing

    async def _list(self, listing: Listing) -> None:
        """Page one listing with the one paging loop: its start (watermark, page size),
        its probes, first URL and fetch (the run's hooks: a dialect's, or the engine's
        own), the walk, and the walk's outcome on the listing; a terminal error (404,
        other 4xx) ends the listing with it, a rejected credential (401) is raised."""
        resource, hooks, client = listing.resource, self.hooks, self.client
        listing.label = label = listing.label or f"{self.source.name}/{resource.name}"
        hooks.open(listing)
        if listing.path.startswith("!missing:"):
            listing.error = (
                f"{label}: parent {listing.parent_key} has no field "
                f"{listing.path.removeprefix('!missing:')!r} for the path"
            )
            return
        ep = resource.endpoint
        listing.paginator = paginator = make_paginator(
            ep.paginator,
            ep.data_selector,
            listing.page_size or None,
            detect=hooks.detects_paginator,
        )

        async def fetch(url: str, page_no: int) -> Page:
            page = await hooks.fetch(client, listing, url, page_no)
            listing.pages += 1
            return page

        try:
            # None: the probe failed as a first page would (the outcome is set)
            known = await hooks.probe(client, listing)
            # a probe may size the listing anew, and its paginator with it
            paginator = listing.paginator
            if known is not None:
                done = await walk(
                    fetch,
                    hooks.first_url(listing),
                    paginator,
                    incremental=hooks.newest_first(listing),
                    max_wave=client.concurrency,
                    max_pages=resource.max_pages,
                    label=label,
                    known=known,
                )
                listing.failed += done.failed
                listing.complete, listing.stop_reason = done.complete, done.stop_reason
                shortfall = paginator.shortfall if isinstance(paginator, AutoPaginator) else None
                if shortfall and listing.complete:
                    listing.complete, listing.stop_reason = False, f"{label}: {shortfall}"
                if done.malformed and hooks.malformed_is_error:
                    listing.error = done.stop_reason
                await hooks.close(client, listing)
        except AuthError:
            raise
        except TerminalError as exc:
            listing.error, listing.error_kind = str(exc), type(exc).__name__
        await hooks.done(client, listing)


async def _together(jobs: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run ``jobs`` concurrently; when one raises (a rejected credential), the others
    are cancelled, not left running on a client that is being closed."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()


def make_client(
    config: RestConfig,
    source: Source,
    *,
    run_id: str,
    base_url: str,
    load_block: SecretLoader | None,
    remembered: tuple[int, int | None] | None,
    transport: httpx.AsyncBaseTransport | None = None,
    token: str | None = None,
    dialect: Dialect = PLAIN,
) -> RestClient:
    """The source's client: the dialect's headers, credentials (``token`` for one that
    takes it), timeout and retries (``Dialect.client_setup``); its window (from what the
    host allowed last time) and governor."""
    concurrency = source.client.concurrency
    setup = dialect.client_setup(config, source, load_block, token)
    http = make_http(
        base_url,  # resolved once, by fetch_source
        headers=setup.headers,
        concurrency=concurrency,
        timeout=setup.timeout,
        transport=transport,
        # to the API's host only, never to another host a Link header names
        credentials=setup.credentials.headers,
    )
    window = AdaptiveWindow(
        initial=remembered[0] if remembered else config.http.initial_window,
        maximum=concurrency,
        ceiling=remembered[1] if remembered else None,
        adaptive=config.http.adaptive,
        ramp=config.http.ramp,
    )
    limits = source.client.rate_limit
    from ingest.security import allowed_endpoints

    return RestClient(
        http,
        RateLimitGovernor(
            reserve=limits.reserve, max_wait=limits.max_wait, secondary_backoff=limits.backoff
        ),
        setup.retry,
        concurrency=concurrency,
        secondary_retries=setup.limit_retries,
        run_id=run_id,
        window=window,
        auth_hint=setup.credentials.hint,
        who=setup.who,
        auth_params=setup.credentials.params,
        max_page_bytes=config.http.max_page_bytes,
        body_deadline=config.http.body_deadline,
        allowed_hops=frozenset(allowed_endpoints(config.allowed_hosts)),
        max_retry_after=config.http.max_retry_after,
    )


def fetch_source(
    config: RestConfig,
    source: Source,
    *,
    run_id: str,
    base_url: str | None = None,
    load_block: SecretLoader | None = None,
    full_refresh: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
    token: str | None = None,
    priors: Any = None,
    part: str = "",
    dialect: Dialect | None = None,
) -> RestSummary:
    """Page every resource of ``source`` and stage its rows; returns the run's summary
    (the dialect's, for a source that has one).

    ``dialect``: the API's own ways (``ingest.rest.dialect``), handed in by the caller
    (``ingest.rest.dialects.dialect_of``); None for a source that declares none.
    ``priors``: the dialect's stored state (``Dialect.load_state``), when the caller
    loaded it. ``part`` names this call's staged parts that belong to no listing
    (requests, the host's window) when several calls of one run each fetch a share of
    it (one task per repository on a cluster).

    Raises ``AuthError`` when the credentials are missing or rejected; every other
    outcome is in the summary (per listing: complete, or why it stopped).
    """
    if dialect is None:
        if source.client.dialect is not None:
            raise ValueError(
                f"client.dialect {source.client.dialect}: hand its dialect object "
                "(ingest.rest.dialects.dialect_of)"
            )
        dialect = PLAIN
    warm_up()  # the HTTP client's set-up, while the state is read below
    state = store.SourceState()
    if dialect.engine_state and not full_refresh:
        # rows per listing: what page_size auto sizes pages by (a scan of each table)
        tables = {
            r.name: source.table(r)
            for r in source.resources
            if size_param(source.resolved(r)) is not None
        }
        state = store.load_state(config.location, source.name, tables)
    if priors is None:
        priors = dialect.load_state(config.location, source, full_refresh)
    base_url = base_url or source.client.base_url  # resolved once, here
    host = httpx.URL(base_url).netloc.decode()  # the key of its remembered window
    remembered = store.load_window(config.location, host)
    opened = Opened(
        config, source, run_id, base_url, load_block, transport, token, host, part, dialect
    )
    return run_async(
        with_shared_limits(
            config.shared,
            config.task_runner,
            base_url,
            lambda shared: _fetch(opened, state, priors, full_refresh, remembered, shared),
            in_flight=source.client.concurrency,
            remembered=remembered,
        )
    )


@dataclass(frozen=True)
class Opened:
    """What one call of ``fetch_source`` was given."""

    config: RestConfig
    source: Source
    run_id: str
    base_url: str  # the API root this call uses (an override, else the file's)
    load_block: SecretLoader | None
    transport: httpx.AsyncBaseTransport | None
    token: str | None
    host: str
    part: str
    dialect: Dialect


async def _fetch(
    run: Opened,
    state: store.SourceState,
    priors: Any,
    full_refresh: bool,
    remembered: tuple[int, int | None] | None,
    shared: SharedLimits | None,
) -> RestSummary:
    started = time.perf_counter()
    config, source, run_id = run.config, run.source, run.run_id
    client = make_client(
        config,
        source,
        run_id=run_id,
        base_url=run.base_url,
        load_block=run.load_block,
        remembered=remembered,
        transport=run.transport,
        token=run.token,
        dialect=run.dialect,
    )
    if shared is not None:
        client.shared = shared.slots
        client.governor.shared = shared.budget
    runner: SourceRun | None = None
    try:
        async with client.http:
            hooks = await run.dialect.start(
                client, RunStart(config, source, run_id, priors, full_refresh)
            )
            runner = SourceRun(
                config,
                source,
                client,
                state,
                run_id=run_id,
                full_refresh=full_refresh,
                hooks=hooks,
            )
            await runner.run()
    finally:
        if runner is not None:
            await runner.hooks.stage([x for xs in runner.listings.values() for x in xs])
        window = client.window
        assert window is not None
        size, ceiling = window.remembered()
        store.write_run(
            config.location,
            run_id,
            f"rest-{source.name}{run.part}",
            # what the listings did not stage as each ended
            list(runner.hooks.unstored(client)) if runner is not None else client.requests,
            HostWindow(
                host=run.host,
                window_size=size,
                ceiling=ceiling,
                limit_answers=window.limit_answers,
                requests=len(client.requests),
                run_id=run_id,
                updated_at=datetime.now(UTC),
            )
            if config.http.adaptive
            else None,
        )
    assert runner is not None
    listings = [x for xs in runner.listings.values() for x in xs]
    summary = runner.hooks.summary(client, listings, shared)
    if summary is None:
        summary = summarize(runner, client)
        if isinstance(runner.hooks, PlainRun) and (plans := runner.hooks.plans()):
            summary.size_plan = "; ".join(f"{n}: {p.describe()}" for n, p in plans.items())
            summary.size_plan_figures = {n: p.figures() for n, p in plans.items()}
        summary.schema_changes = store.staged_schema_changes(
            config.location, run_id, store.source_tables(source.name)
        )
    summary.seconds = time.perf_counter() - started
    return summary


def summarize(runner: SourceRun, client: RestClient) -> RestSummary:
    summary = RestSummary(run_id=runner.run_id, source=runner.source.name)
    reasons: set[str] = set()
    for name, listings in runner.listings.items():
        errors = [x.error for x in listings if x.error]
        stops = sorted({x.stop_reason for x in listings if x.stop_reason and not x.error})
        reasons.update(stops)
        summary.resources.append(
            {
                "resource": name,
                "table": listings[0].table if listings else "",
                "listings": len(listings),
                "complete": all(x.complete and not x.error for x in listings),
                "records": sum(len(x.rows) for x in listings),
                "unchanged": sum(x.unchanged for x in listings),
                "pages": sum(x.pages for x in listings),
                "requests": sum(x.requests for x in listings),
                "failed_pages": sum(x.failed for x in listings),
                "page_size": max((x.page_size for x in listings), default=0),
                "note": redact((errors[0] if errors else "; ".join(stops))[:300]) or None,
            }
        )
        summary.errors += [(name, e) for e in errors]
    summary.records = sum(r["records"] for r in summary.resources)
    summary.failed_pages = sum(r["failed_pages"] for r in summary.resources)
    client.tally(summary)
    summary.stopped = "; ".join(sorted(reasons))[:500] or None
    return summary
