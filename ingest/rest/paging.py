"""Paging strategies: how one API says where the next page is.

A strategy reads one response (URL, headers, decoded body) and answers two
questions:

* ``next_url``: the page after this one, for following a listing one page
  at a time;
* ``planned_urls``: the pages that can be requested *now*, all at once,
  because this response says how many there are (GitHub's ``rel="last"``, a
  total count in the body). Empty when the API does not say.

GitHub's ``Link`` header is one strategy (``LinkHeaderPaginator``); page
numbers, offsets, cursors in the body or in a header, and a next URL in the
body are others. A new API style is a new class here, not a fork of the
loop: there is one paging loop, ``ingest.rest.engine.walk``, which every
source uses (the GitHub sync adds ETags and a watermark through its fetch).

Each strategy ends a listing by dlt's rules for its type (``stops_on_empty`` is dlt's
``stop_after_empty_page``): a next link, a cursor, a total, ``has_more_path``, an empty
page; never a page shorter than the size asked for, which an API that caps its pages
sends long before the end. A field a stop rule reads that a page lacks
(``MissingFieldError``) stops the listing incomplete. ``detect_paginator`` and
``find_records_path`` are dlt's detector, for a paginator or ``data_selector`` a source
leaves out (``AutoPaginator``).
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import httpx

from ingest.errors import IngestError

# Pages one listing fetches at most unless told (a resource's ``max_pages``, ``walk``'s):
# a ``rel="last"`` or a total announcing 10^9 pages builds this many URLs, not 10^9, and a
# cursor that never ends stops here. 10,000 pages of 100 records is a million records a
# listing; a listing stopped by the bound is reported incomplete, never complete.
MAX_PLANNED = 10_000

_LINK = re.compile(r'<([^>]*)>\s*;\s*rel="([^"]+)"')


def parse_link_header(value: str | None) -> dict[str, str]:
    """``<url>; rel="next", <url>; rel="last"`` -> ``{"next": url, "last": url}``."""
    links: dict[str, str] = {}
    for url, rels in _LINK.findall(value or ""):
        for rel in rels.split():
            links[rel] = url
    return links


def set_param(url: str, name: str, value: Any) -> str:
    """``url`` with one query parameter replaced (or added)."""
    return str(httpx.URL(url).copy_set_param(name, str(value)))


_SLOT = "9817364528173645"  # a number no URL of a listing holds: where the value goes


def numbered(url: str, name: str, values: range) -> list[str]:
    """``[set_param(url, name, v) for v in values]``, built from one template: a planned
    listing of 100,000 pages costs ~40 ms instead of ~3 s of the event loop."""
    template = set_param(url, name, _SLOT)
    if template.count(_SLOT) != 1:
        return [set_param(url, name, v) for v in values]
    head, tail = template.split(_SLOT)
    return [f"{head}{v}{tail}" for v in values]


def get_param(url: str, name: str) -> str | None:
    return httpx.URL(url).params.get(name)


def dig(data: Any, path: str | None) -> Any:
    """``dig({"a": {"b": 1}}, "a.b") == 1``; None when any step is missing."""
    if not path:
        return data
    for part in path.split("."):
        if not isinstance(data, Mapping):
            return None
        data = data.get(part)
    return data


def count(value: Any) -> int | None:
    """A count from a body field, a header or a parameter: an int, or a string of digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class MissingFieldError(IngestError, ValueError):
    """A field the paginator's stop rule reads is not in the page (dlt fails the
    listing there too): the listing cannot tell where it ends."""


def has_more(data: Any, path: str) -> bool:
    """dlt's ``has_more_path``: a boolean, or a string of one ("true", "0" ...)."""
    value = dig(data, path)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUTHS:
        return _TRUTHS[value.strip().lower()]
    raise MissingFieldError(f"has_more_path {path!r} holds {value!r}, not a boolean")


_TRUTHS = {
    **dict.fromkeys(("true", "1", "yes", "y", "on", "t"), True),
    **dict.fromkeys(("false", "0", "no", "n", "off", "f"), False),
}


class Paginator(ABC):
    """One API's paging convention. Subclasses are small and stateless."""

    items_path: str | None = None  # where the list of items sits in the body (None: the body)
    # dlt's stop_after_empty_page: an empty page ends the listing (dlt's default for every
    # paginator but the body cursor, which follows its cursor past an empty page)
    stops_on_empty: bool = True

    def first_url(self, url: str) -> str:
        """The URL of the first page (adds the paging parameters the strategy needs)."""
        return url

    def items(self, data: Any) -> list[Any]:
        """The page's records: the list at ``items_path``; an object there is one record
        (as dlt reads it); nothing there, none."""
        found = dig(data, self.items_path)
        if isinstance(found, list):
            return list(found)
        return [found] if isinstance(found, Mapping) else []

    @abstractmethod
    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        """The page after ``url``, or None at the end."""

    def planned_urls(
        self, url: str, headers: Mapping[str, str], data: Any, limit: int = MAX_PLANNED
    ) -> list[str]:
        """Further pages known from the first response (at most ``limit``, however many the
        API announces: the count is clamped before a URL is built); fetched concurrently."""
        return []

    def total_items(self, url: str, headers: Mapping[str, str], data: Any) -> int | None:
        """Items in the whole listing, as this (first) response tells; None when it does
        not say. What a probe page reads (``ingest.rest.sizing``)."""
        return None

    def sized_urls(
        self, url: str, headers: Mapping[str, str], data: Any, size: int, limit: int = MAX_PLANNED
    ) -> list[str]:
        """Pages 2.. of the listing at page size ``size`` (at most ``limit``), from this first
        response and the listing's total; empty when the strategy cannot resize or the total
        is unknown."""
        return []


class LinkHeaderPaginator(Paginator):
    """GitHub (and RFC 8288) ``Link`` headers.

    ``planned_urls`` derives pages 2..N only from the ``rel="last"`` URL the
    API gave, by changing its ``page`` parameter: the page numbers ``last``
    implies, nothing else. Without ``last`` it plans nothing and the loop
    follows ``rel="next"``.
    """

    stops_on_empty = False  # the listing ends where no next link is (dlt's header_link)

    def __init__(
        self, page_param: str = "page", size_param: str = "per_page", next_rel: str = "next"
    ) -> None:
        self.page_param, self.size_param, self.next_rel = page_param, size_param, next_rel

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        return parse_link_header(headers.get("link")).get(self.next_rel)

    def last_page(self, headers: Mapping[str, str]) -> int | None:
        last = parse_link_header(headers.get("link")).get("last")
        page = get_param(last, self.page_param) if last else None
        return int(page) if page and page.isdigit() else None

    def planned_urls(
        self, url: str, headers: Mapping[str, str], data: Any, limit: int = MAX_PLANNED
    ) -> list[str]:
        links = parse_link_header(headers.get("link"))
        last = links.get("last")
        last_no = self.last_page(headers)
        if not last or last_no is None:
            return []
        current = get_param(links.get("next", ""), self.page_param) if "next" in links else None
        start = int(current) if current and current.isdigit() else 2
        return numbered(last, self.page_param, range(start, last_no + 1)[:limit])

    def total_items(self, url: str, headers: Mapping[str, str], data: Any) -> int | None:
        """From page 1: ``rel="last"``'s page number times its page size (exact for a page
        size of 1, else at most one page too many); without ``last`` or ``next``, page 1
        is the whole listing."""
        links = parse_link_header(headers.get("link"))
        last_no = self.last_page(headers)
        if last_no is not None:
            size = get_param(links["last"], self.size_param)
            return last_no * int(size) if size and size.isdigit() else None
        if "next" in links:
            return None
        return len(self.items(data))

    def sized_urls(
        self, url: str, headers: Mapping[str, str], data: Any, size: int, limit: int = MAX_PLANNED
    ) -> list[str]:
        """Pages 2.. at ``size`` (at most ``limit``), written as the API's own ``rel="last"``
        URL with the page size and page number replaced, so they are the URLs that the Link
        headers of pages of that size name (their stored ETags match on later runs)."""
        total = self.total_items(url, headers, data)
        last = parse_link_header(headers.get("link")).get("last")
        if total is None or last is None or size < 1:
            return []
        sized = set_param(last, self.size_param, size)
        return numbered(sized, self.page_param, range(2, -(-total // size) + 1)[:limit])


class _Numbered(Paginator):
    """What page numbers and offsets share: the position sent as ``param`` (from
    ``start``), with dlt's stop rules: an empty page (``stop_after_empty_page``), the
    total (of ``noun``, at ``total_path`` in the body or in ``total_header``), a false
    ``has_more_path``, or ``maximum`` end the listing. A page shorter than the size asked
    for does not: an API that caps its pages below it still gives every row. A total
    allows planning the pages after the first."""

    noun = ""
    param = size_param = ""
    size: int | None = None
    start = first_page = 0
    total_path: str | None = None
    total_header: str | None = None
    has_more_path: str | None = None
    maximum: int | None = None

    def _step(self, items: int) -> int:
        """How far the position moves past a page of ``items`` records."""
        raise NotImplementedError

    def _plannable(self, items: int) -> bool:
        """Whether the first page, of ``items`` records, allows planning the rest."""
        return True

    def _per_total(self, url: str) -> int | None:
        """Records per unit of the total, at the size ``url`` asked for."""
        return 1

    def first_url(self, url: str) -> str:
        if self.size is not None and get_param(url, self.size_param) is None:
            url = set_param(url, self.size_param, self.size)
        return set_param(url, self.param, self.start)

    def _position(self, url: str) -> int:
        value = get_param(url, self.param)
        return int(value) if value and value.lstrip("-").isdigit() else self.start

    def _total(self, data: Any, headers: Mapping[str, str]) -> int | None:
        """The total a page announces at ``total_path`` in its body, else in its
        ``total_header``; None when neither is declared, a ``MissingFieldError`` when one
        is and the answer lacks it (or holds no number there)."""
        path, header = self.total_path, self.total_header
        total = dig(data, path) if path else None
        if total is None and header:
            total = headers.get(header)
        found = count(total)
        if found is None and (path or header):
            where = path or f"header {header}"
            raise MissingFieldError(
                f"the total of {self.noun} at {where} is missing or not a number"
            )
        return found

    def total_items(self, url: str, headers: Mapping[str, str], data: Any) -> int | None:
        """The total the answer announces, in records at the size it was asked at (for
        pages: exact for a page size of 1, else at most one page too many); None without
        one."""
        scale = self._per_total(url)
        if not (self.total_path or self.total_header) or scale is None:
            return None
        try:
            total = self._total(data, headers)
        except MissingFieldError:
            return None
        return None if total is None else total * scale

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        n = len(self.items(data))
        if self.stops_on_empty and n == 0:
            return None
        position, total = self._position(url), self._total(data, headers)
        nxt = position + self._step(n)
        if total is not None and nxt >= total + self.first_page:
            return None
        if self.maximum is not None and nxt >= self.maximum:
            return None
        if self.has_more_path and not has_more(data, self.has_more_path):
            return None
        return set_param(url, self.param, nxt)

    def planned_urls(
        self, url: str, headers: Mapping[str, str], data: Any, limit: int = MAX_PLANNED
    ) -> list[str]:
        n = len(self.items(data))
        if self.has_more_path or not self._plannable(n):
            return []
        total = self._total(data, headers)
        if total is None:
            return []
        end = total + self.first_page  # the first position past the listing
        if self.maximum is not None:
            end = min(end, self.maximum)
        step = self._step(n)
        return numbered(url, self.param, range(self._position(url) + step, end, step)[:limit])


class PageNumberPaginator(_Numbered):
    """``?page=N``: pages ``first_page .. first_page + total - 1`` by the total number of
    pages (``total_pages_path`` or ``total_pages_header``), up to ``maximum_page``.
    ``page_size`` is sent as ``size_param`` only when it is given (dlt's page_number
    sends no size)."""

    noun = "pages"

    def __init__(
        self,
        *,
        page_param: str = "page",
        size_param: str = "per_page",
        page_size: int | None = 100,
        first_page: int = 1,
        start_page: int | None = None,
        total_pages_path: str | None = None,
        total_pages_header: str | None = None,
        items_path: str | None = None,
        stop_after_empty_page: bool = True,
        has_more_path: str | None = None,
        maximum_page: int | None = None,
    ) -> None:
        self.param, self.size_param, self.size = page_param, size_param, page_size
        self.first_page = first_page
        self.start = first_page if start_page is None else start_page
        self.total_path, self.total_header = total_pages_path, total_pages_header
        self.items_path, self.stops_on_empty = items_path, stop_after_empty_page
        self.has_more_path, self.maximum = has_more_path, maximum_page

    def _step(self, items: int) -> int:
        return 1

    def _plannable(self, items: int) -> bool:
        return items > 0 or not self.stops_on_empty

    def _per_total(self, url: str) -> int | None:
        size = get_param(url, self.size_param) or ""
        return int(size) if size.isdigit() else None


class OffsetPaginator(_Numbered):
    """``?offset=N&limit=M``, ended by the total of items (``total_path``/``total_header``)
    or ``maximum_offset`` too. The next offset is the current one plus the records this
    page held (dlt adds ``limit``; the two agree unless a server caps its pages below the
    limit, where adding ``limit`` would skip rows); planned offsets step by the limit, so
    only after a full first page."""

    noun = "items"

    def __init__(
        self,
        *,
        offset_param: str = "offset",
        limit_param: str = "limit",
        limit: int = 100,
        total_path: str | None = "total",
        total_header: str | None = None,
        items_path: str | None = None,
        start: int = 0,
        stop_after_empty_page: bool = True,
        has_more_path: str | None = None,
        maximum_offset: int | None = None,
    ) -> None:
        self.param, self.size_param, self.size = offset_param, limit_param, limit
        self.total_path, self.total_header = total_path, total_header
        self.items_path, self.start = items_path, start
        self.stops_on_empty = stop_after_empty_page
        self.has_more_path, self.maximum = has_more_path, maximum_offset

    def _step(self, items: int) -> int:
        return items or self.size or 1

    def _plannable(self, items: int) -> bool:
        return items == self.size


class BodyCursorPaginator(Paginator):
    """An opaque cursor in the body (``{"items": [...], "next_cursor": "abc"}``).

    Cursors cannot be planned: each page names the next, so pages of one
    listing are fetched one after another (listings of different sources
    still run concurrently).
    """

    def __init__(
        self,
        *,
        cursor_path: str = "next_cursor",
        cursor_param: str = "cursor",
        items_path: str | None = "items",
        stop_after_empty_page: bool = False,
        has_more_path: str | None = None,
    ) -> None:
        self.cursor_path, self.cursor_param, self.items_path = cursor_path, cursor_param, items_path
        self.stops_on_empty, self.has_more_path = stop_after_empty_page, has_more_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        """dlt's rules: no cursor (absent, null, empty) ends the listing; so does an empty
        page when ``stop_after_empty_page``, or a false ``has_more_path``."""
        cursor = dig(data, self.cursor_path)
        if not cursor or (self.stops_on_empty and not self.items(data)):
            return None
        if self.has_more_path and not has_more(data, self.has_more_path):
            return None
        return set_param(url, self.cursor_param, cursor)


class HeaderCursorPaginator(Paginator):
    """An opaque cursor in a response header (``X-Next-Cursor: abc``), sent back as a
    query parameter. Sequential, like every cursor."""

    stops_on_empty = False  # dlt's header cursor follows its header whatever the page held

    def __init__(
        self,
        *,
        cursor_header: str = "next",
        cursor_param: str = "cursor",
        items_path: str | None = None,
    ) -> None:
        self.cursor_header, self.cursor_param = cursor_header, cursor_param
        self.items_path = items_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        cursor = headers.get(self.cursor_header)
        return set_param(url, self.cursor_param, cursor) if cursor else None


class JsonLinkPaginator(Paginator):
    """The next page's URL in the body (``{"next": "https://..."}``); as in dlt, the
    listing ends where there is none, not at an empty page."""

    stops_on_empty = False

    def __init__(self, *, next_url_path: str = "next", items_path: str | None = None) -> None:
        self.next_url_path, self.items_path = next_url_path, items_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        nxt = dig(data, self.next_url_path)
        return str(httpx.URL(url).join(nxt)) if isinstance(nxt, str) and nxt else None


class SinglePagePaginator(Paginator):
    """One page, no paging (dlt's ``single_page``)."""

    def __init__(self, items_path: str | None = None) -> None:
        self.items_path = items_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        return None


# --------------------------------------------------------------------------- detection
# dlt's detector (``dlt.sources.helpers.rest_client.detector``), for a paginator or a
# data_selector a source leaves out: the same keys, the same order, the same depth.

RECORD_KEYS = frozenset(
    (
        "data",
        "items",
        "results",
        "entries",
        "records",
        "rows",
        "entities",
        "payload",
        "content",
        "objects",
        "values",
    )
)
_NON_RECORD_KEYS = frozenset(("meta", "metadata", "pagination", "links", "extras", "headers"))
_TOTAL_PAGES_KEYS = (re.compile("^total_pages$"), re.compile("^pages$"), re.compile("^totalpages$"))


def _lists(data: Mapping[str, Any], path: tuple[str, ...], out: list[tuple[str, ...]]) -> None:
    """Paths of the lists in ``data``, at most three keys deep, shallowest first per branch."""
    if len(path) > 2:
        return
    for key, value in data.items():
        if isinstance(value, list):
            out.append((*path, str(key)))
        elif isinstance(value, Mapping):
            _lists(value, (*path, str(key)), out)


def find_records_path(data: Any) -> str:
    """Where a page's records are, as dlt finds them when ``data_selector`` is left out:
    the first list under a records-like key (``data``, ``items``, ``results`` ...), else
    the first list, else the page itself (``""``; an object is then one record)."""
    if not isinstance(data, Mapping):
        return ""
    found: list[tuple[str, ...]] = []
    _lists(data, (), found)
    if not found:
        return ""
    for path in found:
        if path[-1] in RECORD_KEYS and path[-1] not in _NON_RECORD_KEYS:
            return ".".join(path)
    return ".".join(found[0])


def _next_path(data: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], Any] | None:
    """dlt's ``find_next_page_path``: the first key starting with ``next`` (any case) that
    holds a scalar, or a mapping with an ``href``/``url``, searched depth first."""
    if not isinstance(data, Mapping):
        return None
    for key, value in data.items():
        if str(key).lower().startswith("next"):
            if isinstance(value, Mapping):
                for k, v in value.items():
                    if str(k).lower().startswith(("href", "url")) and _scalar(v):
                        return (*path, str(key), str(k)), v
            elif _scalar(value):
                return (*path, str(key)), value
        if isinstance(value, Mapping):
            found = _next_path(value, (*path, str(key)))
            if found is not None:
                return found
    return None


def _total_pages_path(data: Any, path: tuple[str, ...] = ()) -> tuple[tuple[str, ...], Any] | None:
    if not isinstance(data, Mapping):
        return None
    for key, value in data.items():
        if any(p.match(str(key).lower()) for p in _TOTAL_PAGES_KEYS) and _scalar(value):
            return (*path, str(key)), value
        if isinstance(value, Mapping):
            found = _total_pages_path(value, (*path, str(key)))
            if found is not None:
                return found
    return None


def _scalar(value: Any) -> bool:
    return isinstance(value, str | int | float) and not isinstance(value, bool)


def detect_paginator(
    headers: Mapping[str, str], data: Any, items_path: str | None
) -> tuple[Paginator, str]:
    """The paginator dlt's detector picks from a first response, and what it is: a
    ``Link`` header with ``next``; a next URL in the body (``next``, ``next.href`` ...,
    absolute or starting with ``/``); a total of pages (``total_pages``, ``pages``,
    ``totalPages``: page numbers from 0, as dlt's detected paginator counts); a next
    cursor in the body (any other ``next...`` value); else a single page."""
    if parse_link_header(headers.get("link")).get("next"):
        return LinkHeaderPaginator(), "header_link (a Link header with rel=next)"
    nxt = _next_path(data)
    if nxt is not None and isinstance(nxt[1], str) and nxt[1].startswith(("http", "/")):
        path = ".".join(nxt[0])
        return JsonLinkPaginator(next_url_path=path, items_path=items_path), f"json_link ({path})"
    total = _total_pages_path(data)
    if total is not None and count(total[1]) is not None:
        path = ".".join(total[0])
        return (
            PageNumberPaginator(
                page_size=None, first_page=0, total_pages_path=path, items_path=items_path
            ),
            f"page_number (total pages at {path}, pages from 0)",
        )
    if nxt is not None:
        path = ".".join(nxt[0])
        return (
            BodyCursorPaginator(cursor_path=path, items_path=items_path),
            f"cursor (at {path}, sent as cursor)",
        )
    return SinglePagePaginator(items_path=items_path), "single_page"


_ANNOUNCED = ("count", "total", "total_count", "totalcount", "total_results", "totalresults")


def announced_total(data: Any) -> int | None:
    """A count of the whole listing that a page announces at its top level (``count``,
    ``total``, ``total_count`` ...), or None."""
    if not isinstance(data, Mapping):
        return None
    for key, value in data.items():
        if str(key).lower() in _ANNOUNCED:
            found = count(value)
            if found is not None:
                return found
    return None


class AutoPaginator(Paginator):
    """A paginator left out (or ``paginator: auto``): the one ``detect_paginator`` picks
    from the first page, used for every page after it."""

    def __init__(self, items_path: str | None = None) -> None:
        self.items_path = items_path
        self.chosen: Paginator | None = None
        self.shortfall: str | None = None  # why a detected single page is not the listing

    def detect(self, headers: Mapping[str, str], data: Any, items_path: str | None) -> Paginator:
        if self.chosen is None:
            self.items_path = items_path
            self.chosen, _ = detect_paginator(headers, data, items_path)
            held, announced = len(self.chosen.items(data)), announced_total(data)
            if isinstance(self.chosen, SinglePagePaginator) and (announced or 0) > held:
                self.shortfall = (
                    f"no paginator was detected on the first page, which holds {held} of the "
                    f"{announced} records it announces; declare endpoint.paginator"
                )
        return self.chosen

    @property
    def stops_on_empty(self) -> bool:  # type: ignore[override]
        return self.chosen.stops_on_empty if self.chosen is not None else True

    def items(self, data: Any) -> list[Any]:
        return self.chosen.items(data) if self.chosen is not None else super().items(data)

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        return self.detect(headers, data, self.items_path).next_url(url, headers, data)

    def planned_urls(
        self, url: str, headers: Mapping[str, str], data: Any, limit: int = MAX_PLANNED
    ) -> list[str]:
        return self.detect(headers, data, self.items_path).planned_urls(url, headers, data, limit)
