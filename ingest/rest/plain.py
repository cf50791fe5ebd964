"""The engine's own paging of a declared source: the run hooks of the plain dialect
(``ingest.rest.dialect.Run``), as ``ingest.rest.github`` holds GitHub's.

* ``open``: the watermark of the listing's last complete sync, and its page size: the
  declared one, or, when the file leaves it open (``size_param``), one planned from the
  latency that probes of page 1 show (``prepare``, ``probe``: ``ingest.rest.sizing``),
  else chosen up front for the budget;
* ``fetch``: a page's records read at ``data_selector`` (found on the first page when
  left out, as dlt finds it) into rows, through the resource's ``processing_steps``;
  a page that lies (no records, a record without its key) is a ``MalformedPageError``;
* ``resource_done``: records fetched again exactly as stored are left unstaged;
* ``stage``: every listing's rows and its sync row, at the end of the run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol
from urllib.parse import urlencode

import httpx

from ingest.redact import redact
from ingest.rest import store
from ingest.rest.client import RestClient
from ingest.rest.config import RestConfig
from ingest.rest.dialect import Run
from ingest.rest.engine import Listing, Page, probe_page_one
from ingest.rest.errors import MalformedPageError, NotFoundError, RequestError, StepError
from ingest.rest.paging import (
    AutoPaginator,
    LinkHeaderPaginator,
    Paginator,
    count,
    dig,
    find_records_path,
    set_param,
)
from ingest.rest.sizing import (
    PER_PAGE_MAX,
    PRIOR,
    PROBE_SIZES,
    HostLimits,
    PagePlan,
    SizePlanner,
    choose_per_page,
)
from ingest.rest.source import ProcessingStep, Resource, Source, fill_placeholders
from ingest.rest.spec import make_paginator
from ingest.rest.steps import resolve

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


class SourceRunView(Protocol):
    """What the plain hooks read of their run (``ingest.rest.run.SourceRun``, which
    imports this module)."""

    config: RestConfig
    source: Source
    client: RestClient
    state: store.SourceState
    run_id: str
    full_refresh: bool
    listings: dict[str, list[Listing]]

    def path_of(self, resource: Resource, parent: dict[str, Any] | None) -> str: ...


class PlainRun(Run):
    """The engine's own paging of a declared source (the plain dialect's run): the
    watermark of each listing's last complete sync, the declared or automatic page
    size, records read at ``data_selector`` (``read``), unchanged records
    left unstaged, every listing staged at the end of the run."""

    malformed_is_error = True
    detects_paginator = True

    def __init__(self, run: SourceRunView) -> None:
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
        chosen up front (``page_size``), as for an incremental rerun (a
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
                budget=run.client.governor.spendable(run.config.rest.budget_share),
            )

        self.planners[resource.name] = SizePlanner(
            len(listings),
            latency=PRIOR,
            limits=limits,
            expected=run.state.listing_rows.get(resource.name) or run.config.rest.expected_rows,
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
        answers = await probe_page_one(
            listing,
            planner,
            lambda size: client.get(set_param(base, param, size), label=listing.label, paced=False),
            _resized(resource, listing.paginator, 1, param),
            selector=resource.endpoint.data_selector or None,
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
        listing.page_size = self.page_size(resource)

    def newest_first(self, listing: Listing) -> bool:
        inc = listing.resource.endpoint.incremental
        return listing.watermark is not None and inc is not None and inc.row_order == "desc"

    def first_url(self, listing: Listing) -> str:
        assert listing.paginator is not None
        return listing.paginator.first_url(self.first_path(listing))

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
        return self.read(
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
            await asyncio.to_thread(self.drop_unchanged, table, listings)

    async def stage(self, listings: Sequence[Listing]) -> None:
        run = self.run
        for listing in listings:
            if not listing.resource.selected:
                continue  # fetched for its children only
            part = store.part_name(listing.resource.name, listing.parent_key)
            await asyncio.to_thread(
                store.write_listing,
                run.config.location,
                run.run_id,
                listing.table,
                part,
                list(listing.rows.values()),
                self.sync_row(listing),
                listing.resource,
            )

    def drop_unchanged(self, table: str, listings: list[Listing]) -> None:
        """Records fetched again exactly as stored (the boundary record an inclusive
        ``since`` returns, a listing read whole every run) are counted as unchanged, not
        staged: a rerun with nothing changed writes no row. Children still see them as
        parents (``records``)."""
        fetched = {k: r["data"] for x in listings for k, r in x.rows.items()}
        same = store.unchanged_keys(self.run.config.location, table, fetched)
        if not same:
            return
        for x in listings:
            for key in same & x.rows.keys():
                del x.rows[key]
                x.unchanged += 1

    def first_path(self, listing: Listing) -> str:
        ep = listing.resource.endpoint
        parent = listing.parent
        path = listing.path or self.run.path_of(listing.resource, None)
        params: dict[str, Any] = {
            name: fill_placeholders(value, parent, quote_it=False)
            if isinstance(value, str)
            else value
            for name, value in ep.params.items()
        }
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

    def read(
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
        if selector is None:  # the first page: data_selector, else found on it as dlt finds it
            declared = resource.endpoint.data_selector
            listing.selector = selector = find_records_path(data) if declared is None else declared
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
        inherited: dict[str, Any] = {}  # include_from_parent: the parent's fields, dlt's names
        if resource.include_from_parent and listing.parent is not None and resource.parent:
            for name in resource.include_from_parent:
                inherited[f"_{resource.parent[0]}_{name}"] = dig(listing.parent, name)
        for i, record in enumerate(found):
            if not isinstance(record, dict):
                raise MalformedPageError(
                    f"{url}: record {i} of page {page_no} is a {type(record).__name__}, "
                    "not an object",
                    url=url,
                )
            if inherited:
                record = {**record, **inherited}
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
                "key": f"{key}@{self.run.run_id}" if resource.disposition == "append" else key,
                "parent_key": listing.parent_key or None,
                "source": self.run.source.name,
                "resource": resource.name,
                "cursor": None if cursor is None else str(cursor),
                "data": json.dumps(record, separators=(",", ":"), default=str),
                "run_id": self.run.run_id,
                "fetched_at": now,
            }
            listing.records.append((key, record))
        stop = (
            desc and oldest is not None and cursor_order(oldest) < cursor_order(listing.watermark)
        )
        return Page(url, headers, data, page_no, list(found), stop=stop)

    def page_size(self, resource: Resource) -> int:
        """The declared page size; one left open (``size_param``), before any answer: the
        fastest whose requests fit the budget by the configured latency (a probe may plan
        it anew, ``probe``); for pages read one after another, the largest."""
        spec = resource.endpoint.paginator
        declared = spec.page_size if spec else None
        if spec is not None and spec.type == "offset" and spec.limit:
            declared = spec.limit
        if spec is not None and spec.type == "offset" and declared is None:
            declared = count(resource.endpoint.params.get(spec.page_size_param or spec.limit_param))
        if size_param(resource) is None:
            # 0: the file leaves the size unsent (what its params say goes out as written)
            return int(declared or (DEFAULT_PAGE_SIZE if spec and spec.type == "offset" else 0))
        if not _parallel_kind(resource):
            return PER_PAGE_MAX  # a page costs a round trip: the fewest round trips
        budget = self.run.client.governor.spendable(self.run.config.rest.budget_share)
        parents = max(1, len(self.run.listings.get(resource.name, [])) or 1)
        rows = self.run.state.listing_rows.get(resource.name) or self.run.config.rest.expected_rows
        window = self.run.client.window
        return choose_per_page(
            [rows] * parents,
            concurrency=(
                window.plan_size(self.run.config.http.initial_window)
                if window
                else self.run.client.concurrency
            ),
            budget=budget,
            base_s=PRIOR.base_s,
            per_item_s=PRIOR.per_item_s,
        )

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
            "source": self.run.source.name,
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
            "run_id": self.run.run_id,
            "started_at": listing.started,
            "ended_at": datetime.now(UTC),
        }


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
            out = resolve(path)(record)
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
    named = spec.page_size_param is not None and param not in resource.endpoint.params
    return param if spec.page_size is None and named and not spec.limit else None


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


def _param(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
