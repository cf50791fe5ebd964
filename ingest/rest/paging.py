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
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

import httpx

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


def _count(value: Any) -> int | None:
    """A count from a body field or a header: an int, or a string of digits."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


class Paginator(ABC):
    """One API's paging convention. Subclasses are small and stateless."""

    items_path: str | None = None  # where the list of items sits in the body (None: the body)

    def first_url(self, url: str) -> str:
        """The URL of the first page (adds the paging parameters the strategy needs)."""
        return url

    def items(self, data: Any) -> list[Any]:
        found = dig(data, self.items_path)
        return list(found) if isinstance(found, list) else []

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

    def __init__(self, page_param: str = "page", size_param: str = "per_page") -> None:
        self.page_param, self.size_param = page_param, size_param

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        return parse_link_header(headers.get("link")).get("next")

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


class PageNumberPaginator(Paginator):
    """``?page=N``; the total number of pages, when the body gives it, allows planning.

    Without a total, the next page is requested while the current one is full.
    """

    def __init__(
        self,
        *,
        page_param: str = "page",
        size_param: str = "per_page",
        page_size: int = 100,
        first_page: int = 1,
        total_pages_path: str | None = None,
        total_pages_header: str | None = None,
        items_path: str | None = None,
    ) -> None:
        self.page_param, self.size_param = page_param, size_param
        self.page_size, self.first_page = page_size, first_page
        self.total_pages_path, self.items_path = total_pages_path, items_path
        self.total_pages_header = total_pages_header

    def first_url(self, url: str) -> str:
        url = set_param(url, self.size_param, self.page_size)
        return set_param(url, self.page_param, self.first_page)

    def _page(self, url: str) -> int:
        value = get_param(url, self.page_param)
        return int(value) if value and value.isdigit() else self.first_page

    def _total(self, data: Any, headers: Mapping[str, str]) -> int | None:
        total = dig(data, self.total_pages_path) if self.total_pages_path else None
        if total is None and self.total_pages_header:
            total = headers.get(self.total_pages_header)
        return _count(total)

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        page, total = self._page(url), self._total(data, headers)
        if total is not None:
            last = total + self.first_page - 1
            return set_param(url, self.page_param, page + 1) if page < last else None
        return (
            set_param(url, self.page_param, page + 1)
            if len(self.items(data)) >= self.page_size
            else None
        )

    def planned_urls(
        self, url: str, headers: Mapping[str, str], data: Any, limit: int = MAX_PLANNED
    ) -> list[str]:
        total = self._total(data, headers)
        if total is None:
            return []
        last = total + self.first_page - 1
        return numbered(url, self.page_param, range(self._page(url) + 1, last + 1)[:limit])


class OffsetPaginator(Paginator):
    """``?offset=N&limit=M``; a total item count in the body allows planning."""

    def __init__(
        self,
        *,
        offset_param: str = "offset",
        limit_param: str = "limit",
        limit: int = 100,
        total_path: str | None = "total",
        total_header: str | None = None,
        items_path: str | None = None,
    ) -> None:
        self.offset_param, self.limit_param, self.limit = offset_param, limit_param, limit
        self.total_path, self.items_path = total_path, items_path
        self.total_header = total_header

    def first_url(self, url: str) -> str:
        return set_param(set_param(url, self.limit_param, self.limit), self.offset_param, 0)

    def _offset(self, url: str) -> int:
        value = get_param(url, self.offset_param)
        return int(value) if value and value.isdigit() else 0

    def _total(self, data: Any, headers: Mapping[str, str]) -> int | None:
        total = dig(data, self.total_path) if self.total_path else None
        if total is None and self.total_header:
            total = headers.get(self.total_header)
        return _count(total)

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        offset, total = self._offset(url), self._total(data, headers)
        n = len(self.items(data))
        if (
            n == 0
            or (total is not None and offset + n >= total)
            or (total is None and n < self.limit)
        ):
            return None
        return set_param(url, self.offset_param, offset + n)

    def planned_urls(
        self, url: str, headers: Mapping[str, str], data: Any, limit: int = MAX_PLANNED
    ) -> list[str]:
        total = self._total(data, headers)
        if total is None:
            return []
        start = self._offset(url) + self.limit
        return numbered(url, self.offset_param, range(start, total, self.limit)[:limit])


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
    ) -> None:
        self.cursor_path, self.cursor_param, self.items_path = cursor_path, cursor_param, items_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        cursor = dig(data, self.cursor_path)
        return set_param(url, self.cursor_param, cursor) if cursor else None


class HeaderCursorPaginator(Paginator):
    """An opaque cursor in a response header (``X-Next-Cursor: abc``), sent back as a
    query parameter. Sequential, like every cursor."""

    def __init__(
        self,
        *,
        cursor_header: str = "x-next-cursor",
        cursor_param: str = "cursor",
        items_path: str | None = None,
    ) -> None:
        self.cursor_header, self.cursor_param = cursor_header, cursor_param
        self.items_path = items_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        cursor = headers.get(self.cursor_header)
        return set_param(url, self.cursor_param, cursor) if cursor else None


class JsonLinkPaginator(Paginator):
    """The next page's URL in the body (``{"next": "https://..."}``)."""

    def __init__(self, *, next_url_path: str = "next", items_path: str | None = None) -> None:
        self.next_url_path, self.items_path = next_url_path, items_path

    def next_url(self, url: str, headers: Mapping[str, str], data: Any) -> str | None:
        nxt = dig(data, self.next_url_path)
        return str(httpx.URL(url).join(nxt)) if isinstance(nxt, str) and nxt else None
