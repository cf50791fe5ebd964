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
(``ingest.rest.dialect.Run``): the engine's own (``_Plain``), or those of the
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
import json
import logging
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlencode

import httpx

from ingest.errors import TerminalError
from ingest.redact import redact
from ingest.rest import store
from ingest.rest.aio import run_async
from ingest.rest.auth import SecretLoader
from ingest.rest.client import RestClient, make_http, warm_up
from ingest.rest.dialect import PLAIN, Dialect, Run, RunStart
from ingest.rest.engine import Listing, Page, ProbeFigures, probe_page_one, walk
from ingest.rest.errors import (
    AuthError,
    MalformedPageError,
    NotFoundError,
    RequestError,
    StepError,
)
from ingest.rest.paging import (
    AutoPaginator,
    LinkHeaderPaginator,
    Paginator,
    dig,
    find_records_path,
    set_param,
)
from ingest.rest.ratelimit import RateLimitGovernor
from ingest.rest.records import HostWindow, RestSummary
from ingest.rest.shared import SharedLimits, with_shared_limits
from ingest.rest.sizing import (
    PER_PAGE_MAX,
    PRIOR,
    PROBE_SIZES,
    HostLimits,
    PagePlan,
    SizePlanner,
    choose_per_page,
)
from ingest.rest.source import (
    PLACEHOLDER,
    ProcessingStep,
    Resource,
    Source,
    make_paginator,
    resolve_function,
)
from ingest.rest.window import AdaptiveWindow
from ingest.settings import Settings
from ingest.storage.location import LakeLocation

log = logging.getLogger(__name__)

DEFAULT_PAGE_SIZE = 100


def cursor_order(value: Any) -> tuple[int, Any]:
    """Cursor values compare as numbers when they are numbers, else as strings."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return (0, value)
    return (1, str(value))


def record_key(record: dict[str, Any], keys: list[str]) -> str | None:
    values = [dig(record, k) for k in keys]
    if any(v is None for v in values):
        return None
    return "/".join(str(v) for v in values)


def fill_placeholders(text: str, parent: dict[str, Any] | None, *, quote_it: bool) -> str:
    def value(match: Any) -> str:
        found = dig(parent, match.group(2)) if parent is not None else None
        if found is None:
            raise KeyError(match.group(2))
        return quote(str(found), safe="") if quote_it else str(found)

    return PLACEHOLDER.sub(value, text)


class SourceRun:
    """The state of one run of one source."""

    def __init__(
        self,
        settings: Settings,
        source: Source,
        client: RestClient,
        state: store.SourceState,
        *,
        run_id: str,
        full_refresh: bool,
        hooks: Run | None = None,
        lake: LakeLocation | None = None,
    ) -> None:
        self.settings, self.source, self.client = settings, source, client
        self.lake = lake if lake is not None else settings.location
        self.state, self.run_id, self.full_refresh = state, run_id, full_refresh
        # a dialect's hooks, else the engine's own paging (the plain dialect's)
        self.hooks: Run = hooks if hooks is not None else _Plain(self)
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
            if isinstance(self.hooks, _Plain):
                self.hooks.prepare(resource, listings)
            await _together([self._list(x) for x in listings])
            await self.hooks.resource_done(resource, table, listings)

    def _drop_unchanged(self, table: str, listings: list[Listing]) -> None:
        """Records fetched again exactly as stored (the boundary record an inclusive
        ``since`` returns, a listing read whole every run) are counted as unchanged, not
        staged: a rerun with nothing changed writes no row. Children still see them as
        parents (``records``)."""
        fetched = {k: r["data"] for x in listings for k, r in x.rows.items()}
        same = store.unchanged_keys(self.lake, table, fetched)
        if not same:
            return
        for x in listings:
            for key in same & x.rows.keys():
                del x.rows[key]
                x.unchanged += 1

    def _children(self, resource: Resource, table: str, parent_name: str) -> list[Listing]:
        """One listing per parent record: fetched now, or stored by an earlier run."""
        parents: dict[str, Any] = {}
        parent_resource = next(r for r in self.source.resources if r.name == parent_name)
        parent_table = self.source.table(parent_resource)
        for key, record in store.stored_records(self.lake, parent_table):
            parents[key] = record
        for listing in self.listings.get(parent_name, []):
            parents.update(dict(listing.records))
        out = []
        for key, record in sorted(parents.items()):
            path = self._path(resource, record)
            out.append(Listing(resource, table, parent_key=key, parent=record, path=path))
        return out

    def _path(self, resource: Resource, parent: dict[str, Any] | None) -> str:
        assert resource.endpoint.path is not None
        try:
            return fill_placeholders(resource.endpoint.path, parent, quote_it=True)
        except KeyError as exc:
            return f"!missing:{exc.args[0]}"

    def _first_url(self, listing: Listing) -> str:
        ep = listing.resource.endpoint
        parent = listing.parent
        path = listing.path or self._path(listing.resource, None)
        params: dict[str, Any] = {}
        for name, value in ep.params.items():
            params[name] = (
                fill_placeholders(value, parent, quote_it=False)
                if isinstance(value, str)
                else value
            )
        inc = ep.incremental
        if inc is not None and inc.start_param:
            start = listing.watermark if listing.watermark is not None else inc.initial_value
            if start is not None:
                params[inc.start_param] = inc.sent(start)
        if inc is not None and inc.end_param and inc.end_value is not None:
            params[inc.end_param] = inc.sent(inc.end_value)
        spec = ep.paginator
        # page_number and offset carry the size themselves; the others through a parameter
        sized = spec is not None and spec.type not in ("page_number", "offset")
        if sized and spec is not None and spec.page_size_param and listing.page_size:
            # a size the file declares in params goes out as declared
            params.setdefault(spec.page_size_param, listing.page_size)
        query = urlencode({k: _param(v) for k, v in params.items()})
        return f"{path}?{query}" if query else path

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

    def _read(
        self,
        listing: Listing,
        url: str,
        headers: httpx.Headers,
        data: Any,
        page_no: int,
        desc: bool,
    ) -> Page:
        """A page's records as rows; raises ``MalformedPageError`` for a page that lies."""
        resource = listing.resource
        selector = listing.selector
        if selector is None:
            selector = resource.endpoint.data_selector
        if selector is None:  # left out: found on the first page, as dlt finds it
            selector = find_records_path(data)
        if listing.selector is None:
            listing.selector = selector
            paginator = listing.paginator
            if isinstance(paginator, AutoPaginator):
                paginator.detect(headers, data, selector)
            elif paginator is not None:
                paginator.items_path = selector
        found = dig(data, selector) if selector else data
        if isinstance(found, dict):
            found = [found]  # a response that is one object is one record (dlt's)
        if not isinstance(found, list):
            what = (
                f"no list at data_selector {selector!r}"
                if selector
                else "an object, not a list of records (set endpoint.data_selector)"
            )
            held = ", ".join(sorted(data)[:8]) if isinstance(data, dict) else type(data).__name__
            raise MalformedPageError(
                f"{url}: page {page_no} of {resource.name} has {what}; it holds: {held}", url=url
            )
        keys = resource.key_fields
        inc = resource.endpoint.incremental
        now = datetime.now(UTC)
        oldest: Any = None
        for i, record in enumerate(found):
            if not isinstance(record, dict):
                raise MalformedPageError(
                    f"{url}: record {i} of page {page_no} is a {type(record).__name__}, "
                    "not an object",
                    url=url,
                )
            if resource.include_from_parent and listing.parent is not None and resource.parent:
                parent_name = resource.parent[0]
                record = {
                    **record,
                    **{
                        f"_{parent_name}_{f}": dig(listing.parent, f)
                        for f in resource.include_from_parent
                    },
                }
            # the cursor of the record as the API gave it (dlt's incremental comes before
            # its processing steps): a record a filter drops still moves the watermark
            cursor = dig(record, inc.cursor_path) if inc is not None else None
            if (
                inc is not None
                and inc.end_value is not None
                and cursor is not None
                and cursor_order(cursor) >= cursor_order(inc.end_value)
            ):
                continue  # past the end of the range asked for: not stored
            if cursor is not None:
                if listing.newest is None or cursor_order(cursor) > cursor_order(listing.newest):
                    listing.newest = cursor
                if oldest is None or cursor_order(cursor) < cursor_order(oldest):
                    oldest = cursor
            if resource.processing_steps:
                stepped = apply_steps(resource.processing_steps, record, url, i)
                if stepped is None:
                    continue  # a filter dropped it: not stored, no parent of children
                record = stepped
            own = record_key(record, keys) if keys else None
            if keys and own is None:
                raise MalformedPageError(
                    f"{url}: record {i} of page {page_no} has no primary key {'/'.join(keys)!r}",
                    url=url,
                )
            if own is None:
                own = json.dumps(record, sort_keys=True)
            key = f"{listing.parent_key}/{own}" if listing.parent_key else own
            listing.rows[key] = {
                # append: every run's rows kept beside the earlier ones
                "key": f"{key}@{self.run_id}" if resource.disposition == "append" else key,
                "parent_key": listing.parent_key or None,
                "source": self.source.name,
                "resource": resource.name,
                "cursor": None if cursor is None else str(cursor),
                "data": json.dumps(record, separators=(",", ":"), default=str),
                "run_id": self.run_id,
                "fetched_at": now,
            }
            listing.records.append((key, record))
        stop = (
            desc and oldest is not None and cursor_order(oldest) < cursor_order(listing.watermark)
        )
        return Page(url, headers, data, page_no, list(found), stop=stop)

    def _page_size(self, resource: Resource) -> int:
        """The declared page size; one left open (``size_param``), before any answer: the
        fastest whose requests fit the budget by the configured latency (a probe may plan
        it anew, ``_Plain.probe``); for pages read one after another, the largest."""
        spec = resource.endpoint.paginator
        declared = spec.page_size if spec else None
        if spec is not None and spec.type == "offset" and spec.limit:
            declared = spec.limit
        if spec is not None and spec.type == "offset" and declared is None:
            declared = _int(resource.endpoint.params.get(spec.page_size_param or spec.limit_param))
        if size_param(resource) is None:
            # 0: the file leaves the size unsent (what its params say goes out as written)
            return int(declared or (DEFAULT_PAGE_SIZE if spec and spec.type == "offset" else 0))
        if not _parallel_kind(resource):
            return PER_PAGE_MAX  # a page costs a round trip: the fewest round trips
        budget = self._budget()
        parents = max(1, len(self.listings.get(resource.name, [])) or 1)
        rows = self.state.listing_rows.get(resource.name) or self.settings.rest.expected_rows
        window = self.client.window
        return choose_per_page(
            [rows] * parents,
            concurrency=(
                window.plan_size(self.settings.http.initial_window)
                if window
                else self.client.concurrency
            ),
            budget=budget,
            base_s=PRIOR.base_s,
            per_item_s=PRIOR.per_item_s,
        )

    def _budget(self) -> int | None:
        """The requests this run may spend: a share of what the API announced above the
        reserve (None: nothing announced)."""
        governor = self.client.governor
        if governor.budget is None or governor.unlimited:
            return None
        above = max(0, governor.budget.remaining - governor.effective_reserve)
        return max(1, int(above * self.settings.rest.budget_share))

    # ------------------------------------------------------------------ results

    def sync_row(self, listing: Listing) -> dict[str, Any]:
        watermark = listing.watermark
        inc = listing.resource.endpoint.incremental
        if (
            listing.complete
            and not (inc is not None and inc.end_value is not None)  # a range: no watermark
            and listing.newest is not None
            and (watermark is None or cursor_order(listing.newest) > cursor_order(watermark))
        ):
            watermark = listing.newest
        return {
            "source": self.source.name,
            "resource": listing.resource.name,
            "parent_key": listing.parent_key or None,
            "watermark": None if watermark is None else json.dumps(watermark),
            "complete": listing.complete and listing.error is None,
            "stop_reason": redact(listing.error or listing.stop_reason or "") or None,
            "pages": listing.pages,
            "requests": listing.requests,
            "items": len(listing.rows),
            "failed_pages": listing.failed,
            "page_size": listing.page_size,
            "run_id": self.run_id,
            "started_at": listing.started,
            "ended_at": datetime.now(UTC),
        }


class _Plain(Run):
    """The engine's own paging of a declared source (the plain dialect's run): the
    watermark of each listing's last complete sync, the declared or automatic page
    size, records read at ``data_selector`` (``SourceRun._read``), unchanged records
    left unstaged, every listing staged at the end of the run."""

    malformed_is_error = True
    detects_paginator = True

    def __init__(self, run: SourceRun) -> None:
        self.run = run
        # per resource whose page size the file leaves open and whose listings are probed
        self.planners: dict[str, SizePlanner] = {}

    def prepare(self, resource: Resource, listings: list[Listing]) -> None:
        """Before the listings of ``resource`` start: when the file leaves its page size
        open (``size_param``), its pages can be asked for at once, and its listings are
        few enough to start at once in the window, each is probed (page 1 at
        ``PROBE_SIZES``) and one page size and in-flight count is planned for all of them
        from the latency the probes show (``SizePlanner``), within the host's known
        ceiling (else the configured ``concurrency``: an API that documents nothing has
        its ceiling found by the window, as before) and the budget. More listings: the size
        chosen up front (``SourceRun._page_size``), as for an incremental rerun (a
        watermark stored: what it reads is what changed, not the listing's size)."""
        run, window = self.run, self.run.client.window
        if size_param(resource) is None or not _parallel_kind(resource) or window is None:
            return
        if not listings or len(listings) > max(window.size, 1):
            return
        if not run.full_refresh and any(k[0] == resource.name for k in run.state.watermarks):
            return  # an incremental rerun reads what changed, not the listing's size

        def limits() -> HostLimits:
            return HostLimits(
                in_flight=min(window.ceiling or window.maximum, window.maximum),
                budget=run._budget(),
            )

        self.planners[resource.name] = SizePlanner(
            len(listings),
            latency=PRIOR,
            limits=limits,
            expected=run.state.listing_rows.get(resource.name) or run.settings.rest.expected_rows,
            # a ceiling the host showed (remembered) is opened to at once; else the window
            # finds it
            admit=window.admit if window.ceiling else None,
        )
        run.client.governor.learning = len(PROBE_SIZES)

    async def probe(self, client: RestClient, listing: Listing) -> list[str] | None:
        """For a resource with a planner (``prepare``): page 1 at ``PROBE_SIZES`` at once;
        the items the listing holds (what the smallest answer announces: a ``Link``
        header's last page, a total of pages or of items) and each answer's time on the
        wire go to the planner; the listing is then read at the planned size (the pages
        after the first known at once for a ``Link`` header). None (the listing's
        outcome set) when the probe failed as a first page would."""
        resource = listing.resource
        planner = self.planners.get(resource.name)
        param = size_param(resource)
        if planner is None or param is None or listing.paginator is None:
            return []
        base = self.first_url(listing)
        probe = _resized(resource, listing.paginator, 1, param)

        def measure(answers: list[Any]) -> ProbeFigures:
            listing.requests += sum(a.attempts for a in answers)
            first = answers[0]
            probe.items_path = resource.endpoint.data_selector or find_records_path(first.data)
            total = probe.total_items(first.url, first.headers, first.data)
            samples = [(len(probe.items(a.data)), a.wire_seconds) for a in answers]
            return total, samples, total is not None

        answers = await probe_page_one(
            listing,
            planner,
            lambda size: client.get(set_param(base, param, size), label=listing.label, paced=False),
            measure,
        )
        if answers is None:
            return None
        first = answers[0]
        listing.paginator = _resized(resource, listing.paginator, listing.page_size, param)
        if isinstance(listing.paginator, LinkHeaderPaginator):
            return listing.paginator.sized_urls(
                first.url, first.headers, first.data, listing.page_size
            )
        return []

    def plans(self) -> dict[str, PagePlan]:
        """The plans made this run, by resource."""
        return {n: p.plan for n, p in self.planners.items() if p.plan is not None}

    def open(self, listing: Listing) -> None:
        run, resource = self.run, listing.resource
        inc = resource.endpoint.incremental
        if inc is not None and not run.full_refresh:
            stored = run.state.watermarks.get((resource.name, listing.parent_key))
            listing.watermark = json.loads(stored) if stored is not None else None
        listing.page_size = run._page_size(resource)

    def newest_first(self, listing: Listing) -> bool:
        inc = listing.resource.endpoint.incremental
        return listing.watermark is not None and inc is not None and inc.row_order == "desc"

    def first_url(self, listing: Listing) -> str:
        assert listing.paginator is not None
        return listing.paginator.first_url(self.run._first_url(listing))

    async def fetch(self, client: RestClient, listing: Listing, url: str, page_no: int) -> Page:
        ep = listing.resource.endpoint
        ignored = {a.status_code for a in ep.response_actions if a.action == "ignore"}
        try:
            answer = await client.get(url, label=listing.label)
        except (NotFoundError, RequestError) as exc:
            if exc.status not in ignored:
                raise
            listing.requests += 1
            return Page(url, httpx.Headers(), None, page_no, [])  # an empty last page
        listing.requests += answer.attempts
        return self.run._read(
            listing, answer.url, answer.headers, answer.data, page_no, self.newest_first(listing)
        )

    async def resource_done(self, resource: Resource, table: str, listings: list[Listing]) -> None:
        # replace and a merge_key keep the run's rows whole (the others go); append keys
        # them by run
        if (
            not self.run.full_refresh
            and resource.disposition == "merge"
            and not (resource.merge_key)
        ):
            await asyncio.to_thread(self.run._drop_unchanged, table, listings)

    async def stage(self, listings: Sequence[Listing]) -> None:
        run = self.run
        for listing in listings:
            if not listing.resource.selected:
                continue  # fetched for its children only
            part = store.part_name(listing.resource.name, listing.parent_key)
            await asyncio.to_thread(
                store.write_listing,
                run.lake,
                run.run_id,
                listing.table,
                part,
                list(listing.rows.values()),
                run.sync_row(listing),
                listing.resource,
            )


def apply_steps(
    steps: Sequence[ProcessingStep], record: dict[str, Any], url: str, index: int
) -> dict[str, Any] | None:
    """``record`` (number ``index`` of the page at ``url``) through the resource's
    ``processing_steps`` in order: None when a filter drops it. A step that raises, or a
    map that returns no mapping, is a ``StepError`` naming the step and the record."""
    where = f"{url}: record {index}"
    for n, step in enumerate(steps):
        path = step.filter or step.map
        assert path is not None
        kind = "filter" if step.filter else "map"
        try:
            out = resolve_function(path)(record)
        except Exception as exc:
            raise StepError(
                f"{where}: processing_steps.{n} ({kind} {path}) raised {type(exc).__name__}: {exc}",
                url=url,
            ) from exc
        if step.filter:
            if not out:
                return None
        elif isinstance(out, dict):
            record = out
        else:
            raise StepError(
                f"{where}: processing_steps.{n} (map {path}) returned a "
                f"{type(out).__name__}, not a mapping",
                url=url,
            )
    return record


async def _together(jobs: Sequence[Coroutine[Any, Any, None]]) -> None:
    """Run ``jobs`` concurrently; when one raises (a rejected credential), the others
    are cancelled, not left running on a client that is being closed."""
    tasks = [asyncio.ensure_future(j) for j in jobs]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()


def _auto_sized(resource: Resource) -> bool:
    return size_param(resource) is not None


def size_param(resource: Resource) -> str | None:
    """The parameter that carries the page size when the file leaves the size to the
    engine: ``page_size: auto``, or a ``page_size_param`` named with no size given
    (neither ``page_size``, an offset's ``limit``, nor that parameter in ``params``);
    None when the size is declared, or the file names no parameter for it (then no size
    is sent but what its params say)."""
    spec = resource.endpoint.paginator
    if spec is None:
        return None
    param: str | None
    if spec.type == "page_number":
        param = spec.page_size_param or "per_page"
    elif spec.type == "offset":
        param = spec.page_size_param or spec.limit_param
    else:
        param = spec.page_size_param
    if param is None or spec.type == "single_page":
        return None
    if spec.page_size == "auto":
        return param
    named = spec.page_size_param is not None
    if spec.page_size is None and named and not spec.limit:
        return None if param in resource.endpoint.params else param
    return None


def _parallel_kind(resource: Resource) -> bool:
    """Whether the paginator can ask for the pages after the first at once (from a total
    or a last page the first answer announces); a cursor's pages come one after another."""
    spec = resource.endpoint.paginator
    return spec is not None and spec.type in ("header_link", "page_number", "offset")


def _resized(resource: Resource, paginator: Paginator, size: int, param: str) -> Paginator:
    """The listing's paginator at page size ``size``, sent as ``param``."""
    ep = resource.endpoint
    out = make_paginator(ep.paginator, ep.data_selector, size)
    if isinstance(out, LinkHeaderPaginator):
        out.size_param = param
    out.items_path = paginator.items_path
    return out


def _int(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def make_client(
    settings: Settings,
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
    setup = dialect.client_setup(settings, source, load_block, token)
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
        initial=remembered[0] if remembered else settings.http.initial_window,
        maximum=concurrency,
        ceiling=remembered[1] if remembered else None,
        adaptive=settings.http.adaptive,
        ramp=settings.http.ramp,
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
        max_page_bytes=settings.http.max_page_bytes,
        body_deadline=settings.http.body_deadline,
        allowed_hops=frozenset(allowed_endpoints(settings.allowed_hosts)),
        max_retry_after=settings.http.max_retry_after,
    )


def fetch_source(
    settings: Settings,
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
    lake: LakeLocation | None = None,
) -> RestSummary:
    """Page every resource of ``source`` and stage its rows; returns the run's summary
    (the dialect's, for a source that has one).

    ``lake``: the run's tables, bound to its lake session (``ingest.context.RunContext.
    lake``); None: the settings' own, unbound.

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
    lake = lake if lake is not None else settings.location
    state = store.SourceState()
    if dialect.engine_state and not full_refresh:
        # rows per listing: what page_size auto sizes pages by (a scan of each table)
        tables = {
            r.name: source.table(r) for r in source.resources if _auto_sized(source.resolved(r))
        }
        state = store.load_state(lake, source.name, tables)
    if priors is None:
        priors = dialect.load_state(lake, source, full_refresh)
    base_url = base_url or source.client.base_url  # resolved once, here
    host = store.host_of(base_url)
    remembered = store.load_window(lake, host)
    opened = Opened(
        settings, source, run_id, base_url, load_block, transport, token, host, part, dialect, lake
    )
    return run_async(
        with_shared_limits(
            settings,
            base_url,
            lambda shared: _fetch(opened, state, priors, full_refresh, remembered, shared),
            in_flight=source.client.concurrency,
            remembered=remembered,
        )
    )


@dataclass(frozen=True)
class Opened:
    """What one call of ``fetch_source`` was given."""

    settings: Settings
    source: Source
    run_id: str
    base_url: str  # the API root this call uses (an override, else the file's)
    load_block: SecretLoader | None
    transport: httpx.AsyncBaseTransport | None
    token: str | None
    host: str
    part: str
    dialect: Dialect
    lake: LakeLocation


async def _fetch(
    run: Opened,
    state: store.SourceState,
    priors: Any,
    full_refresh: bool,
    remembered: tuple[int, int | None] | None,
    shared: SharedLimits | None,
) -> RestSummary:
    started = time.perf_counter()
    settings, source, run_id = run.settings, run.source, run.run_id
    client = make_client(
        settings,
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
                client, RunStart(settings, source, run_id, priors, full_refresh, run.lake)
            )
            runner = SourceRun(
                settings,
                source,
                client,
                state,
                run_id=run_id,
                full_refresh=full_refresh,
                hooks=hooks,
                lake=run.lake,
            )
            await runner.run()
    finally:
        if runner is not None:
            await runner.hooks.stage([x for xs in runner.listings.values() for x in xs])
        window = client.window
        assert window is not None
        size, ceiling = window.remembered()
        store.write_run(
            run.lake,
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
            if settings.http.adaptive
            else None,
        )
    assert runner is not None
    listings = [x for xs in runner.listings.values() for x in xs]
    summary = runner.hooks.summary(client, listings, shared)
    if summary is None:
        summary = summarize(runner, client, 0.0)
        if isinstance(runner.hooks, _Plain) and (plans := runner.hooks.plans()):
            summary.size_plan = "; ".join(f"{n}: {p.describe()}" for n, p in plans.items())
            summary.size_plan_figures = {n: p.figures() for n, p in plans.items()}
        summary.schema_changes = store.staged_schema_changes(
            run.lake, run_id, store.source_tables(source.name)
        )
    summary.seconds = time.perf_counter() - started
    return summary


def summarize(runner: SourceRun, client: RestClient, seconds: float) -> RestSummary:
    window = client.window
    assert window is not None
    summary = RestSummary(run_id=runner.run_id, source=runner.source.name)
    for name, listings in runner.listings.items():
        errors = [x.error for x in listings if x.error]
        stops = sorted({x.stop_reason for x in listings if x.stop_reason and not x.error})
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
    summary.requests = len(client.requests)
    summary.limit_answers = sum(
        1 for r in client.requests if r.status in (403, 429) and r.error is not None
    )
    summary.failed_pages = sum(r["failed_pages"] for r in summary.resources)
    summary.window, summary.ceiling = window.remembered()
    summary.max_in_flight = client.max_in_flight
    reasons = {
        x.stop_reason
        for listings in runner.listings.values()
        for x in listings
        if x.stop_reason and not x.error
    }
    summary.stopped = "; ".join(sorted(reasons))[:500] or None
    summary.seconds = seconds
    return summary
