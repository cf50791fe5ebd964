"""Unit tests of the GitHub source: paging strategies on fake responses
(``httpx.MockTransport``), the automatic per_page, the retry policy and the
rate-limit governor. No server, no Prefect."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from ingest.rest.client import RestClient, safe_url
from ingest.rest.engine import Page, walk
from ingest.rest.errors import AuthError, NotFoundError, PageError, RateLimitStop, RequestError
from ingest.rest.paging import (
    BodyCursorPaginator,
    LinkHeaderPaginator,
    OffsetPaginator,
    PageNumberPaginator,
    parse_link_header,
)
from ingest.rest.ratelimit import RateLimitGovernor, RetryPolicy, parse_budget
from ingest.rest.sizing import choose_per_page, estimate_seconds

# A Link header exactly as api.github.com sends it for page 3 of 10.
_U = "https://api.github.com/repositories/1300192/pulls?state=all&per_page=10"
GITHUB_LINK = (
    f'<{_U}&page=2>; rel="prev", <{_U}&page=4>; rel="next", '
    f'<{_U}&page=10>; rel="last", <{_U}&page=1>; rel="first"'
)


def flatten(paginator: Any, pages: list[Page]) -> list[Any]:
    return [item for page in pages for item in paginator.items(page.data)]


def collect(paginator: Any, handler: Any, url: str = "https://api.test/items") -> list[Page]:
    """Every page of a listing through the one paging loop, in page order; at most three
    requests in flight (what the client's window does in production)."""

    async def go() -> list[Page]:
        pages: list[Page] = []
        limit = asyncio.Semaphore(3)
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:

            async def fetch(u: str, page_no: int) -> Page:
                async with limit:
                    response = await client.get(u)
                response.raise_for_status()
                data = response.json()
                page = Page(
                    str(response.request.url),
                    response.headers,
                    data,
                    page_no,
                    paginator.items(data),
                )
                pages.append(page)
                return page

            done = await walk(fetch, paginator.first_url(url), paginator)
            assert done.complete
        return sorted(pages, key=lambda p: p.page_no)

    return asyncio.run(go())


def test_parse_link_header_github_format() -> None:
    links = parse_link_header(GITHUB_LINK)
    assert set(links) == {"prev", "next", "last", "first"}
    assert links["last"].endswith("per_page=10&page=10")
    assert parse_link_header(None) == {} and parse_link_header("") == {}


def test_link_header_plans_only_the_pages_last_implies() -> None:
    p = LinkHeaderPaginator()
    url = "https://api.github.com/repos/o/r/pulls?state=all&per_page=10&page=3"
    planned = p.planned_urls(url, {"link": GITHUB_LINK}, [])
    assert [httpx.URL(u).params["page"] for u in planned] == [str(n) for n in range(4, 11)]
    # built from the last URL the API gave (its host and path), nothing else changed
    assert all(u.startswith("https://api.github.com/repositories/1300192/pulls?") for u in planned)
    assert all(httpx.URL(u).params["per_page"] == "10" for u in planned)
    assert p.next_url(url, {"link": GITHUB_LINK}, []).endswith("page=4")
    # the last page: no next, nothing planned
    last_link = GITHUB_LINK.split(", ")[0] + ", " + GITHUB_LINK.split(", ")[3]
    assert p.next_url(url, {"link": last_link}, []) is None
    assert p.planned_urls(url, {"link": last_link}, []) == []


def test_link_header_follows_next_when_there_is_no_last() -> None:
    """Without rel="last" (as some endpoints answer) the loop follows rel="next"."""
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        page = int(request.url.params.get("page", "1"))
        seen.append(str(page))
        headers = {}
        if page < 4:
            headers["link"] = f'<https://api.test/items?page={page + 1}>; rel="next"'
        return httpx.Response(200, json=[{"n": page}], headers=headers)

    pages = collect(LinkHeaderPaginator(), handler)
    assert [p.data[0]["n"] for p in pages] == [1, 2, 3, 4]
    assert seen == ["1", "2", "3", "4"]


def test_link_header_fetches_planned_pages_concurrently() -> None:
    in_flight = peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        page = int(request.url.params.get("page", "1"))
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0)  # let the other requests start
        await asyncio.sleep(0)
        in_flight -= 1
        link = '<https://api.test/items?page=2>; rel="next", '
        link += '<https://api.test/items?page=6>; rel="last"'
        return httpx.Response(200, json=[page], headers={"link": link} if page == 1 else {})

    pages = collect(LinkHeaderPaginator(), handler)
    assert [p.data for p in pages] == [[1], [2], [3], [4], [5], [6]]
    assert 1 < peak <= 3


def test_page_number_strategy_with_and_without_total() -> None:
    data = list(range(23))

    def handler(request: httpx.Request) -> httpx.Response:
        page, size = int(request.url.params["page"]), int(request.url.params["per_page"])
        chunk = data[(page - 1) * size : page * size]
        body: dict[str, Any] = {"results": chunk}
        if request.url.params.get("with_total"):
            body["total_pages"] = -(-len(data) // size)
        return httpx.Response(200, json=body)

    plain = PageNumberPaginator(page_size=5, items_path="results")
    pages = collect(plain, handler)
    assert flatten(plain, pages) == data
    planned = PageNumberPaginator(page_size=5, items_path="results", total_pages_path="total_pages")
    pages = collect(planned, handler, "https://api.test/items?with_total=1")
    assert flatten(planned, pages) == data
    assert planned.planned_urls(pages[0].url, {}, pages[0].data)[-1].endswith("page=5")


def test_offset_strategy() -> None:
    data = list(range(42))

    def handler(request: httpx.Request) -> httpx.Response:
        offset, limit = int(request.url.params["offset"]), int(request.url.params["limit"])
        return httpx.Response(200, json={"total": len(data), "rows": data[offset : offset + limit]})

    p = OffsetPaginator(limit=10, items_path="rows")
    pages = collect(p, handler)
    assert flatten(p, pages) == data
    assert len(pages) == 5
    no_total = OffsetPaginator(limit=10, items_path="rows", total_path=None)
    pages = collect(no_total, handler)
    assert flatten(no_total, pages) == data


def test_body_cursor_strategy_is_sequential() -> None:
    cursors = {None: ("a", [1, 2]), "a": ("b", [3]), "b": (None, [4, 5])}

    def handler(request: httpx.Request) -> httpx.Response:
        nxt, items = cursors[request.url.params.get("cursor")]
        return httpx.Response(200, json={"items": items, "next_cursor": nxt})

    p = BodyCursorPaginator()
    pages = collect(p, handler)
    assert flatten(p, pages) == [1, 2, 3, 4, 5]
    assert p.planned_urls(pages[0].url, {}, pages[0].data) == []


def test_choose_per_page_trades_latency_against_budget() -> None:
    kw = {"concurrency": 32, "base_s": 0.08, "per_item_s": 0.008}
    ample = choose_per_page([480], budget=4000, **kw)
    assert 10 <= ample < 50  # small pages in parallel when the budget allows
    assert estimate_seconds(ample, [480], 32, 0.08, 0.008) < estimate_seconds(
        100, [480], 32, 0.08, 0.008
    )
    tight = choose_per_page([480], budget=6, **kw)
    assert tight >= 80 and -(-480 // tight) <= 6  # fewer, larger pages when budget is short
    assert choose_per_page([480], budget=2, **kw) == 100  # nothing fits: fewest requests
    many = choose_per_page([200] * 20, budget=None, **kw)
    assert many > ample  # 20 repositories share the in-flight limit


def test_retry_policy_is_capped_exponential_with_jitter() -> None:
    policy = RetryPolicy(max_attempts=5, base=1.0, cap=8.0, jitter=0.5)
    assert [policy.delay(n, rng=lambda: 0.0) for n in range(1, 6)] == [1, 2, 4, 8, 8]
    assert [policy.delay(n, rng=lambda: 1.0) for n in range(1, 4)] == [0.5, 1, 2]


def rate_headers(remaining: int, limit: int = 100, reset_in: float = 3600) -> dict[str, str]:
    return {
        "x-ratelimit-limit": str(limit),
        "x-ratelimit-remaining": str(remaining),
        "x-ratelimit-used": str(limit - remaining),
        "x-ratelimit-reset": str(int(time.time() + reset_in)),
        "x-ratelimit-resource": "core",
    }


def test_parse_budget() -> None:
    resource, budget = parse_budget(rate_headers(40))  # type: ignore[misc]
    assert resource == "core" and budget.remaining == 40 and budget.limit == 100
    assert parse_budget({}) is None


def test_governor_keeps_the_reserve_counting_requests_in_flight() -> None:
    async def go() -> int:
        gov = RateLimitGovernor(reserve=5, max_wait=0)
        gov.observe(rate_headers(12))
        admitted = 0
        with pytest.raises(RateLimitStop) as info:
            for _ in range(20):
                await gov.acquire()  # nothing answers: every admitted request is in flight
                admitted += 1
                if gov.pending >= 7:
                    # answers arrive: the budget went down by the requests made
                    for k in range(gov.pending):
                        await gov.release(rate_headers(12 - (k + 1)))
        assert "beyond max_wait" in str(info.value)
        return admitted

    assert asyncio.run(go()) == 7  # 12 remaining - 5 reserve


def test_governor_waits_for_a_reset_within_max_wait() -> None:
    async def go() -> float:
        gov = RateLimitGovernor(reserve=0, max_wait=5)
        gov.observe(rate_headers(0, reset_in=0.2))
        start = time.monotonic()
        await gov.acquire()  # waits for the reset, then admits one request to learn the budget
        return time.monotonic() - start

    assert asyncio.run(go()) > 0
    assert RateLimitGovernor(reserve=100).effective_reserve == 100


def test_governor_caps_the_reserve_for_small_limits() -> None:
    gov = RateLimitGovernor(reserve=100)
    gov.observe(rate_headers(60, limit=60))
    assert gov.effective_reserve == 6


def answer_client(handler: Any, **kw: Any) -> RestClient:
    http = httpx.AsyncClient(base_url="https://api.test", transport=httpx.MockTransport(handler))
    return RestClient(http, RateLimitGovernor(reserve=0, **kw), RetryPolicy(3, 0.001, 0.002))


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (401, {"message": "Bad credentials"}, AuthError),
        (404, {"message": "Not Found"}, NotFoundError),
        (403, {"message": "Resource not accessible by integration"}, RequestError),
        (422, {"message": "Validation Failed"}, RequestError),
    ],
)
def test_client_terminal_statuses(
    status: int, body: dict[str, str], error: type[Exception]
) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(status, json=body, headers=rate_headers(50))

    gh = answer_client(handler)
    with pytest.raises(error) as info:
        asyncio.run(gh.get("repos/o/r/pulls", label="o/r"))
    assert calls == 1  # terminal: never retried
    assert str(status) in str(info.value)


def test_client_retries_5xx_then_gives_up_with_a_page_error() -> None:
    statuses = iter([502, 503, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(next(statuses), json=[], headers=rate_headers(50))

    gh = answer_client(handler)
    answer = asyncio.run(gh.get("repos/o/r/pulls"))
    assert answer.status == 200 and answer.attempts == 3
    assert [r.status for r in gh.requests] == [502, 503, 200]

    gh = answer_client(lambda r: httpx.Response(500, json={}, headers=rate_headers(50)))
    with pytest.raises(PageError):
        asyncio.run(gh.get("repos/o/r/pulls"))
    assert len(gh.requests) == 3


def test_client_secondary_limit_pauses_and_retries() -> None:
    answers = iter(
        [
            httpx.Response(
                403,
                json={"message": "You have exceeded a secondary rate limit"},
                headers={**rate_headers(50), "retry-after": "0"},
            ),
            httpx.Response(429, json={"message": "secondary rate limit"}, headers=rate_headers(50)),
            httpx.Response(200, json=[1], headers=rate_headers(49)),
        ]
    )
    gh = answer_client(lambda r: next(answers), secondary_backoff=0.001)
    answer = asyncio.run(gh.get("repos/o/r/pulls"))
    assert answer.data == [1] and gh.governor.secondary_hits == 2


def test_client_stops_cleanly_when_the_primary_limit_resets_too_late() -> None:
    gh = answer_client(
        lambda r: httpx.Response(
            403, json={"message": "API rate limit exceeded"}, headers=rate_headers(0)
        ),
        max_wait=1,
    )
    with pytest.raises(RateLimitStop) as info:
        asyncio.run(gh.get("repos/o/r/pulls"))
    assert "resets at" in str(info.value)


def test_safe_url_masks_secrets() -> None:
    token = "ghp_" + "abcdefghijklmnopqrstuvwxyz0123"
    url = f"https://user:pw@api.test/x?access_token={token}&page=2"
    cleaned = safe_url(url)
    assert "pw@" not in cleaned and "ghp_" not in cleaned and "page=2" in cleaned
    assert json.dumps(cleaned)
