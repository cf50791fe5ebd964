"""The one paging loop of every REST source (GitHub included).

``walk`` pages one listing with a ``Paginator`` (``ingest.rest.paging``) and a
``fetch`` that does the HTTP and reads the page (the source's: ETags, record
extraction, watermark checks live there, not here):

1. the first page; when it says how many pages there are (``rel="last"``, a
   total in the body or a header), the rest are requested concurrently —
   all at once on a full listing, or in waves that double (1, 2, 4 ... up to
   ``max_wave``) on an incremental one, until a page reaches known ground
   (``Page.stop``: items older than the watermark, an unchanged page). The
   announced count is clamped to ``max_pages`` before any URL is built: a
   hostile ``rel="last"`` of 10^9 pages costs ``max_pages`` URLs at most, and
   the listing says it stopped there;
2. otherwise it follows ``next_url`` one page at a time (cursors cannot be
   planned), refusing a URL it has already fetched (a cursor that repeats
   would loop forever) and stopping at ``max_pages``.

When the caller already knows the pages (``known``: a probe told the listing's
size, ``ingest.rest.sizing``), the first page and the rest are requested
together, and pages the first one announces beyond them (the listing grew
meanwhile) after.

``Listing`` is one listing's state as a run pages it (``ingest.rest.run.SourceRun``,
for a declared source's resources and a dialect's repositories alike).

How many requests are in flight is the client's window (``ingest.rest.window``),
shared by every listing of a run, so ``walk`` may ask for many pages at once.

Outcomes: a page that fails after its retries (``PageError``) is counted and the
listing is incomplete; a malformed page (``MalformedPageError``) or a spent
budget (``RateLimitStop``) stops the listing with the reason; terminal errors
(401, 404, other 4xx) are raised to the caller.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ingest.errors import TerminalError
from ingest.redact import redact
from ingest.rest.errors import MalformedPageError, PageError, RateLimitStop
from ingest.rest.paging import MAX_PLANNED, MissingFieldError, Paginator, find_records_path
from ingest.rest.sizing import PROBE_SIZES

if TYPE_CHECKING:
    from ingest.rest.sizing import SizePlanner
    from ingest.rest.source import Resource

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Page:
    """One fetched page, as the source's ``fetch`` read it."""

    url: str  # absolute URL of the request (what the paginator reads parameters from)
    headers: Mapping[str, str]
    data: Any
    page_no: int
    items: list[Any] = field(default_factory=list)
    not_modified: bool = False
    stop: bool = False  # reached known ground: no page after this one is needed


Fetch = Callable[[str, int], Awaitable[Page]]


@dataclass(slots=True)
class Walk:
    """How one listing went."""

    pages: int = 0
    failed: int = 0
    stop_reason: str | None = None
    malformed: bool = False

    @property
    def complete(self) -> bool:
        return self.failed == 0 and self.stop_reason is None


@dataclass
class Listing:
    """One listing of one resource (for a child: of one parent record; for a dialect's
    source: of one repository) and how its paging went, as ``ingest.rest.run.SourceRun``
    pages it with ``walk``."""

    resource: Resource
    table: str
    parent_key: str = ""
    parent: dict[str, Any] | None = None
    path: str = ""
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    records: list[tuple[str, Any]] = field(default_factory=list)  # (key, record) for children
    pages: int = 0
    requests: int = 0
    failed: int = 0
    complete: bool = False
    stop_reason: str | None = None
    error: str | None = None
    watermark: Any = None
    newest: Any = None
    unchanged: int = 0  # records fetched again as they are stored (not in rows)
    page_size: int = 0
    started: datetime = field(default_factory=lambda: datetime.now(UTC))
    label: str = ""  # what its requests are for (a dialect's repository; else source/resource)
    error_kind: str | None = None  # the terminal error's class
    paginator: Paginator | None = None
    selector: str | None = None  # data_selector found on the first page, when left out
    own: Any = None  # a dialect's state of the listing (github.RepoListing)


async def walk(
    fetch: Fetch,
    first_url: str,
    paginator: Paginator,
    *,
    incremental: bool = False,
    max_wave: int = 64,
    max_pages: int = MAX_PLANNED,
    label: str = "",
    known: Sequence[str] = (),
) -> Walk:
    """Page one listing to its end (or to known ground); see the module doc."""
    result = Walk()
    if known and not incremental:
        known = list(known)[: max_pages - 1]
        await _with_known(fetch, first_url, paginator, known, result, label, max_pages)
        return result
    try:
        first = await fetch(first_url, 1)
    except RateLimitStop as exc:
        result.stop_reason = str(exc)
        return result
    except PageError as exc:
        result.failed += 1
        result.malformed = isinstance(exc, MalformedPageError)
        result.stop_reason = f"page failed: {exc}"
        return result
    result.pages = 1
    if first.stop or (_empty(first) and paginator.stops_on_empty):
        return result
    # one more than may be fetched, to tell a listing that goes on past max_pages
    try:
        planned = paginator.planned_urls(first.url, first.headers, first.data, limit=max_pages)
    except MissingFieldError as exc:
        _unreadable(result, first, label, exc)
        return result
    if planned:
        await _planned(fetch, planned[: max_pages - 1], result, incremental, max_wave, label)
        if len(planned) >= max_pages and result.stop_reason is None:
            result.stop_reason = (
                f"stopped at max_pages={max_pages}: the listing announces more pages"
            )
    else:
        await _follow(fetch, first, paginator, result, max_pages, label)
    return result


async def _with_known(
    fetch: Fetch,
    first_url: str,
    paginator: Paginator,
    known: list[str],
    result: Walk,
    label: str,
    max_pages: int = MAX_PLANNED,
) -> None:
    """The first page and the ``known`` pages after it at once; then any page the first
    one announces that was not known (the listing grew since it was probed)."""
    outcomes = await asyncio.gather(
        fetch(first_url, 1),
        *(fetch(u, k + 2) for k, u in enumerate(known)),
        return_exceptions=True,
    )
    if _settle(outcomes, result, label):
        return
    first = outcomes[0]
    if not isinstance(first, Page):
        return
    asked = set(known)
    announced = paginator.planned_urls(first.url, first.headers, first.data, limit=max_pages - 1)
    more = [u for u in announced if u not in asked]
    if more:
        await _planned(fetch, more, result, False, len(more), label, start=len(known) + 2)


async def _planned(
    fetch: Fetch,
    planned: list[str],
    result: Walk,
    incremental: bool,
    max_wave: int,
    label: str,
    start: int = 2,
) -> None:
    """The pages the first one announced: all at once, or in doubling waves."""
    wave = 1 if incremental else len(planned)
    i = 0
    while i < len(planned):
        batch = planned[i : i + wave]
        outcomes = await asyncio.gather(
            *(fetch(u, i + k + start) for k, u in enumerate(batch)), return_exceptions=True
        )
        i += len(batch)
        if _settle(outcomes, result, label):
            return
        wave = min(wave * 2, max(1, max_wave))


async def _follow(
    fetch: Fetch, page: Page, paginator: Paginator, result: Walk, max_pages: int, label: str
) -> None:
    """One page after another, as each names the next."""
    seen = {page.url}
    while True:
        try:
            nxt = paginator.next_url(page.url, page.headers, page.data)
        except MissingFieldError as exc:
            _unreadable(result, page, label, exc)
            return
        if nxt is None:
            return
        if nxt in seen:
            result.failed += 1
            result.malformed = True
            result.stop_reason = redact(
                f"page {page.page_no} of {label or 'the listing'} points back to a page already "
                f"fetched ({nxt}): the cursor repeats, so paging stopped instead of looping"
            )
            return
        if result.pages >= max_pages:
            result.stop_reason = f"stopped at max_pages={max_pages}"
            return
        seen.add(nxt)
        outcomes = await asyncio.gather(fetch(nxt, page.page_no + 1), return_exceptions=True)
        if _settle(outcomes, result, label):
            return
        last = outcomes[0]
        if not isinstance(last, Page):  # failed after its retries: the rest is unknown
            result.stop_reason = result.stop_reason or f"page failed: {last}"
            return
        if last.stop or (_empty(last) and paginator.stops_on_empty):
            return
        page = last


def _empty(page: Page) -> bool:
    return not page.not_modified and not page.items


def _unreadable(result: Walk, page: Page, label: str, exc: Exception) -> None:
    """A page without the field its paginator's stop rule reads: where the listing ends
    cannot be told, so it stops there, incomplete (dlt fails the listing too)."""
    result.failed += 1
    result.malformed = True
    result.stop_reason = redact(
        f"page {page.page_no} of {label or 'the listing'} ({page.url}): {exc}"
    )


def _settle(outcomes: Sequence[Any], result: Walk, label: str) -> bool:
    """Count a wave's outcomes; True when the listing is to stop here."""
    stop = False
    for outcome in outcomes:
        if isinstance(outcome, TerminalError):
            raise outcome
        if isinstance(outcome, RateLimitStop):
            result.stop_reason = str(outcome)
            stop = True
        elif isinstance(outcome, MalformedPageError):
            result.failed += 1
            result.malformed = True
            result.stop_reason = f"page failed: {outcome}"
            stop = True
        elif isinstance(outcome, PageError):
            result.failed += 1
            log.warning("%s: %s", label, outcome)
        elif isinstance(outcome, BaseException):
            raise outcome
        else:
            result.pages += 1
            stop = stop or outcome.stop
    return stop


async def probe_page_one(
    listing: Listing,
    planner: SizePlanner,
    get: Callable[[int], Awaitable[Any]],
    paginator: Paginator,
    *,
    selector: str | None = None,
    parallel: bool = False,
) -> list[Any] | None:
    """Page 1 at each of ``PROBE_SIZES`` at once (``get(size)``) for the planner, which
    sets the listing's page size from what the answers show: the items the listing holds
    (``paginator.total_items`` of the first; ``selector`` where its records are, None:
    found on it), and each answer's items and time on the wire; its pages can be read at
    once when the total is known (or ``parallel``). The answers, or None (the listing's
    outcome set) when the probe failed as a first page would; the planner is left when it
    was never reported to."""
    reported = False
    try:
        planner.probing()
        answers = list(await asyncio.gather(*(get(size) for size in PROBE_SIZES)))
        listing.requests += sum(a.attempts for a in answers)
        first = answers[0]
        paginator.items_path = find_records_path(first.data) if selector is None else selector
        total = paginator.total_items(first.url, first.headers, first.data)
        samples = [(len(paginator.items(a.data)), a.wire_seconds) for a in answers]
        reported = True
        parallel = parallel or total is not None
        listing.page_size = await planner.size_for(total, samples, parallel=parallel)
    except RateLimitStop as exc:
        listing.stop_reason = str(exc)
        return None
    except PageError as exc:
        listing.failed += 1
        listing.stop_reason = f"page failed: {exc}"
        return None
    finally:
        if not reported:
            planner.leave()
    return answers
