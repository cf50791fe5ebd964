"""Unit tests of page sizes planned after a probe: the window's model, the latency model
scaled to the probes, the plan and its budget, the planner's gathering of probes, the
Link-header strategy's total and resized URLs, the paging loop with known pages, and the
GitHub sync end to end on fake answers (``httpx.MockTransport``). No server."""

from __future__ import annotations

import asyncio
import json
import math
from typing import Any

import httpx
import pytest

from dev.servers.github import link_header
from ingest.rest import store
from ingest.rest.client import RestClient
from ingest.rest.config import RestConfig
from ingest.rest.engine import Page, walk
from ingest.rest.github import github_source
from ingest.rest.paging import LinkHeaderPaginator
from ingest.rest.pulls import LISTING_MOVED, GitHubDialect, SyncOptions
from ingest.rest.ratelimit import RateLimitGovernor, RetryPolicy
from ingest.rest.records import RepoResult, RepoState
from ingest.rest.run import SourceRun
from ingest.rest.sizing import (
    HostLimits,
    LatencyModel,
    SizePlanner,
    fit_latency,
    plan_pages,
    plan_seconds,
)
from ingest.rest.window import AdaptiveWindow
from ingest.settings import Settings

MODEL = LatencyModel(0.08, 0.008)  # the devserver's 80 ms + 8 ms per item


def test_latency_model_is_scaled_to_what_the_probes_showed() -> None:
    slow = MODEL.calibrated([(1, 0.176), (1, 0.2), (1, 0.1)])  # median: twice the model
    assert slow.seconds(1) == pytest.approx(0.176)
    assert slow.seconds(40) == pytest.approx(2 * MODEL.seconds(40))
    assert MODEL.calibrated([]) == MODEL
    assert MODEL.calibrated([(1, 0.0)]) == MODEL  # no usable answer: the prior stands


def test_two_sizes_tell_the_fixed_time_from_the_time_per_item() -> None:
    # the field report's host: 260 ms a page + 44 ms a pull request, probed at 1 and 3
    field = fit_latency([(1, 0.304), (3, 0.392)], MODEL)
    assert field.base_s == pytest.approx(0.26) and field.per_item_s == pytest.approx(0.044)
    # several answers of each size: the least-squares line through their noise
    noisy = fit_latency([(1, 0.30), (1, 0.31), (3, 0.39), (3, 0.40), (10, 0.70)], MODEL)
    assert noisy.base_s == pytest.approx(0.26, abs=0.01)
    assert noisy.per_item_s == pytest.approx(0.044 - 0.01 / 9, abs=0.002)
    # one size cannot separate them: the prior's shape, scaled to what was seen
    assert fit_latency([(1, 0.176), (1, 0.176)], MODEL) == MODEL.calibrated([(1, 0.176)])
    # noise that makes a larger page answer sooner: no time per item, the mean as fixed
    flat = fit_latency([(1, 0.102), (3, 0.098)], MODEL)
    assert flat.per_item_s == 0 and flat.base_s == pytest.approx(0.1)
    # the same size answered 20 ms apart: a time per item of 10 ms over sizes 2 apart
    # cannot be told from none, so none is kept (the host's pages cost the same)
    unresolved = fit_latency([(1, 0.30), (1, 0.32), (3, 0.33)], MODEL)
    assert unresolved.per_item_s == 0 and unresolved.noise_s == pytest.approx(0.01)
    # a steeper host through the same noise: 35 of the 45 ms an item the answers show
    # stand out, the line still through their mean (5/3 items, 0.34 s)
    steep_noisy = fit_latency([(1, 0.30), (1, 0.32), (3, 0.40)], MODEL)
    assert steep_noisy.per_item_s == pytest.approx(0.045 - 0.01)
    assert steep_noisy.seconds(5 / 3) == pytest.approx(0.34)
    # a line through zero items below zero: the time is all per item
    steep = fit_latency([(1, 0.01), (3, 0.05)], MODEL)
    assert steep.base_s == 0 and steep.per_item_s == pytest.approx(0.015)


def test_the_plan_finishes_soonest_within_the_hosts_limits() -> None:
    github = HostLimits(in_flight=100, per_minute=900)
    # per-item time dominates (the field report): small pages, nearly 100 in flight
    field = plan_pages([480], latency=LatencyModel(0.26, 0.044), limits=github)
    assert (field.per_page, field.in_flight, field.requests) == (5, 96, 96)
    assert field.seconds == pytest.approx(0.26 + 5 * 0.044)
    # every other size is slower by the same model
    assert all(
        plan_seconds([480], p, field.latency, github)[2] >= field.seconds for p in range(1, 101)
    )
    # the fixed part dominates: a page of 60 costs 3 % more than one of 5, so large
    # pages (the fewest requests within PLAN_TOLERANCE of the fastest), one wave
    slow = plan_pages([480], latency=LatencyModel(1.0, 0.0005), limits=github)
    assert slow.per_page >= 50 and slow.in_flight == slow.requests <= 10
    # a host that allows 20 in flight: one wave of 20 pages of 24
    twenty = plan_pages([480], latency=LatencyModel(0.08, 0.008), limits=HostLimits(20))
    assert (twenty.per_page, twenty.in_flight) == (24, 20)
    # the time of a recheck (page 1 again, no items) counts when more than one page
    checked = plan_pages([480], latency=field.latency, limits=github, recheck=True)
    assert checked.seconds == pytest.approx(field.seconds + 0.26)
    text = field.describe()
    assert "per_page 5, 96 in flight" in text and "0.260 s + 0.0440 s an item" in text
    assert field.figures()["in_flight"] == 96 and field.figures()["host_per_minute"] == 900


def test_the_plan_keeps_to_the_budget_and_the_rate() -> None:
    latency = LatencyModel(0.26, 0.044)
    tight = plan_pages([480], latency=latency, limits=HostLimits(100, budget=6))
    assert tight.requests <= 6 and tight.per_page >= 80
    # nothing fits: the fewest requests
    assert plan_pages([480], latency=latency, limits=HostLimits(100, budget=2)).per_page == 100
    # a host allowing 50 requests a minute: 96 pages of 5 would wait a minute for the
    # last 46, so pages of 10 (48 requests) are sooner
    paced = plan_pages([480], latency=latency, limits=HostLimits(100, per_minute=50))
    assert paced.requests <= 50 and paced.per_page == 10
    assert plan_pages([0], latency=latency, limits=HostLimits(100)).requests == 1


def test_planner_plans_once_every_listing_reported_or_left() -> None:
    admitted: list[int] = []

    async def go() -> tuple[list[int], SizePlanner]:
        planner = SizePlanner(
            3,
            latency=MODEL,
            limits=lambda: HostLimits(100, 900, 1000),
            expected=500,
            admit=admitted.append,
        )
        first = asyncio.ensure_future(planner.size_for(480, [(1, 0.304), (3, 0.392)]))
        await asyncio.sleep(0)
        assert not first.done()  # waits for the others
        # size unknown
        second = asyncio.ensure_future(planner.size_for(None, [(1, 0.304), (3, 0.392)]))
        planner.leave()  # its probe failed
        return [await first, await second], planner

    sizes, planner = asyncio.run(go())
    assert sizes[0] == sizes[1] and planner.plan is not None
    assert planner.plan.items == 480 + 500  # the unknown size counted as the expected one
    # fitted to the four probes, not the configured model
    assert planner.latency.base_s == pytest.approx(0.26)
    assert planner.latency.per_item_s == pytest.approx(0.044)
    assert admitted == [planner.plan.in_flight] and planner.plan.samples == 4


# A Link header exactly as GitHub answers a probe: page 1 of 480 at per_page=1.
_U = "https://api.github.com/repositories/1300192/pulls?state=all&per_page=1"
PROBE_LINK = f'<{_U}&page=2>; rel="next", <{_U}&page=480>; rel="last"'


def test_link_strategy_reads_the_total_and_resizes_from_the_last_url() -> None:
    p = LinkHeaderPaginator()
    url = "https://api.github.com/repos/o/r/pulls?state=all&per_page=1"
    assert p.total_items(url, {"link": PROBE_LINK}, [{}]) == 480
    urls = p.sized_urls(url, {"link": PROBE_LINK}, [{}], 40)
    assert len(urls) == 11  # pages 2..12 of 40
    assert urls[0].endswith("/repositories/1300192/pulls?state=all&per_page=40&page=2")
    assert urls[-1].endswith("per_page=40&page=12")
    assert p.total_items(url, {}, [{}]) == 1  # no Link: page 1 is the whole listing
    assert p.total_items(url, {}, []) == 0
    assert p.total_items(url, {"link": f'<{_U}&page=2>; rel="next"'}, [{}]) is None
    assert p.sized_urls(url, {}, [], 40) == []


def fake_github(total: int, *, grow_after: int | None = None, fail_probe: bool = False) -> Any:
    """A handler answering ``/repos/o/r/pulls`` as GitHub does (items, Link, ETag); after
    ``grow_after`` requests the listing holds ``total + 10`` items; with ``fail_probe`` a
    request for one item answers 502."""
    seen: list[httpx.URL] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        q = request.url.params
        per_page, page = int(q.get("per_page", 30)), int(q.get("page", 1))
        if fail_probe and per_page == 1:
            return httpx.Response(502, json={"message": "Server Error"})
        n = total + 10 if grow_after is not None and len(seen) > grow_after else total
        numbers = list(range(n, 0, -1))[(page - 1) * per_page : page * per_page]
        items = [
            {"number": k, "id": k, "updated_at": f"2025-01-01T00:{k % 60:02d}:00Z"} for k in numbers
        ]
        body = json.dumps(items).encode()
        last = max(1, -(-n // per_page))
        link = link_header("https://api.test", 7, list(q.multi_items()), page, last)
        etag = f'W/"{hash((body, link)) & 0xFFFF:x}"'
        if request.headers.get("if-none-match") == etag:
            return httpx.Response(304, headers={"etag": etag})
        return httpx.Response(200, content=body, headers={"etag": etag, "link": link})

    return handler, seen


def test_walk_asks_for_known_pages_with_the_first_and_then_what_it_announces() -> None:
    # 100 items when probed, 110 afterwards: page 1 at 25 announces a fifth page
    handler, seen = fake_github(100, grow_after=1)
    p = LinkHeaderPaginator()

    async def go() -> list[Page]:
        pages: list[Page] = []
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            probe = await client.get("https://api.test/repos/o/r/pulls?state=all&per_page=1")
            known = p.sized_urls(str(probe.request.url), probe.headers, probe.json(), 25)

            async def fetch(url: str, page_no: int) -> Page:
                response = await client.get(url)
                data = response.json()
                page = Page(str(response.request.url), response.headers, data, page_no)
                page.items = p.items(data)
                pages.append(page)
                return page

            done = await walk(
                fetch, "https://api.test/repos/o/r/pulls?state=all&per_page=25", p, known=known
            )
            assert done.complete and done.pages == 5
        return pages

    pages = asyncio.run(go())
    assert sorted(pg.page_no for pg in pages) == [1, 2, 3, 4, 5]
    assert [u.params["per_page"] for u in seen[1:]] == ["25"] * 5


def github_client(handler: Any) -> RestClient:
    http = httpx.AsyncClient(base_url="https://api.test", transport=httpx.MockTransport(handler))
    return RestClient(
        http,
        RateLimitGovernor(reserve=0),
        RetryPolicy(2, 0.001, 0.002),
        window=AdaptiveWindow(initial=4, maximum=100, ramp=0.001),
    )


async def sync_repos(
    gh: RestClient, repos: list[str], opts_for: Any, priors: dict[str, RepoState]
) -> list[RepoResult]:
    """The repositories' listings, paged by the one run class with the GitHub dialect's
    hooks (nothing stored: the dialect is given no ``on_result``)."""
    settings = Settings()
    run = SourceRun(
        RestConfig.of(settings),
        github_source(settings.github, repos, base_url="https://api.test"),
        gh,
        store.SourceState(),
        run_id="r1",
        full_refresh=False,
        hooks=GitHubDialect(repos, opts_for, priors),
    )
    await run.run()
    return [x.own.result for x in run.listings["pulls"]]


def sync(handler: Any, repos: list[str]) -> tuple[list[Any], SizePlanner]:
    async def go() -> tuple[list[Any], SizePlanner]:
        gh = github_client(handler)
        planner = SizePlanner(
            len(repos),
            latency=MODEL,
            limits=lambda: HostLimits(100, 900),
            expected=500,
            recheck=True,
            admit=gh.window.admit,  # type: ignore[union-attr]
        )

        def opts(repo: str) -> SyncOptions:
            return SyncOptions("all", 30, False, "r1", planner=planner)

        async with gh.http:
            results = await sync_repos(gh, repos, opts, {r: RepoState() for r in repos})
        return results, planner

    return asyncio.run(go())


def test_github_sync_probes_then_reads_every_page_at_the_planned_size() -> None:
    handler, seen = fake_github(480)
    (result,), planner = sync(handler, ["o/r"])
    assert planner.plan is not None and result.sync.complete
    size = planner.plan.per_page
    assert result.sync.per_page == size and sorted(p.number for p in result.pulls) == list(
        range(1, 481)
    )
    pages = math.ceil(480 / size)
    # the probes first: page 1 with one item (twice) and with three
    assert sorted(u.params["per_page"] for u in seen[:3]) == ["1", "1", "3"]
    assert {u.params["per_page"] for u in seen[3:]} == {str(size)}
    # the probes, every page once, and page 1 again at the end (a 304: nothing moved)
    assert len(seen) == 3 + pages + 1 and result.sync.requests == len(seen)
    assert result.sync.pages == pages
    assert [p.page for p in sorted(result.pages, key=lambda p: p.page)] == list(range(1, pages + 1))
    # page records name the URLs later runs ask for: page 1's own, then the Link form
    urls = sorted((p.page, p.url) for p in result.pages)
    assert "/repos/o/r/pulls?" in urls[0][1] and "/repositories/7/pulls?" in urls[1][1]


@pytest.mark.parametrize("moved", [False, True])
def test_github_sync_stages_its_pull_requests_while_page_1_is_looked_at_again(
    moved: bool,
) -> None:
    """The rows are staged during the last look at page 1, not after it: that look's
    answer waits here until they are. A listing that moved meanwhile (10 more pull
    requests by then) still leaves the sync incomplete, its rows staged once."""
    inner, seen = fake_github(120, grow_after=4 if moved else None)  # 4 pages of 30 first
    calls: list[int] = []

    async def go() -> Any:
        staged = asyncio.Event()

        async def handler(request: httpx.Request) -> httpx.Response:
            if request.headers.get("if-none-match"):  # the look at page 1 again
                await asyncio.wait_for(staged.wait(), 10)
            return inner(request)

        async def stage(result: Any) -> None:
            calls.append(len(result.pulls))
            staged.set()

        gh = github_client(handler)
        opts = SyncOptions("all", 30, False, "r1", stage_rows=stage)
        async with gh.http:
            (result,) = await sync_repos(gh, ["o/r"], lambda _: opts, {"o/r": RepoState()})
        return result

    result = asyncio.run(go())
    assert calls == [120] and result.rows_staged and len(result.pulls) == 120
    assert [u.params.get("page", "1") for u in seen] == ["1", "2", "3", "4", "1"]
    assert result.sync.complete is not moved
    assert (result.sync.stop_reason == LISTING_MOVED) is moved


def test_a_failed_probe_leaves_the_planner_and_the_sync_incomplete() -> None:
    handler, _ = fake_github(40, fail_probe=True)
    (result,), planner = sync(handler, ["o/r"])
    assert not result.sync.complete and result.sync.failed_pages == 1
    assert "page failed" in (result.sync.stop_reason or "")
    assert planner.plan is None  # nobody reported: nothing was planned, nobody waits


def test_the_clients_cpu_per_request_asks_for_fewer_larger_pages() -> None:
    """Each request costs the client CPU that requests in flight do not share: 96 pages
    of 5 cost 96 times it, so at 10 ms a request the field report's host is read soonest
    in fewer, larger pages; without it, 96 pages of 5 at once."""
    github = HostLimits(in_flight=100, per_minute=900)
    free = plan_pages([480], latency=LatencyModel(0.26, 0.044), limits=github)
    busy_model = LatencyModel(0.26, 0.044, cpu_s=0.01)
    busy = plan_pages([480], latency=busy_model, limits=github)
    assert (free.per_page, free.in_flight) == (5, 96)
    assert 8 <= busy.per_page <= 16 and busy.in_flight == busy.requests <= 60
    assert busy.seconds == pytest.approx(busy_model.seconds(busy.per_page) + busy.requests * 0.01)
    # by the same model every size is slower than the fastest less the tolerance
    assert all(
        plan_seconds([480], p, busy_model, github)[2] >= busy.seconds / 1.05 for p in range(1, 101)
    )
    # the older model (80 ms + 8 ms an item) at 5 ms a request: about 20 pages, not 80
    older = plan_pages([480], latency=LatencyModel(0.08, 0.008, cpu_s=0.005), limits=github)
    assert 16 <= older.per_page <= 40 and older.in_flight <= 30
    assert older.figures()["request_cpu_seconds"] == 0.005
    assert "client CPU 5.0 ms a request" in older.describe()


def test_pages_read_one_after_another_are_planned_large() -> None:
    """A listing whose pages cannot be asked for at once (a cursor, no total) pays a round
    trip a page: the largest page is the soonest, and its listings go at once."""
    seq = plan_pages(
        [480, 300], latency=LatencyModel(0.26, 0.044), limits=HostLimits(100), parallel=False
    )
    assert seq.per_page == 100 and seq.in_flight == 2 and not seq.figures()["parallel"]
    assert seq.seconds == pytest.approx(5 * (0.26 + 100 * 0.044))
    assert "pages one after another" in seq.describe()


def test_the_planner_measures_the_clients_cpu_over_the_probes() -> None:
    clock = iter([0.5, 1.0, 1.03])  # created; probes sent; last report: 30 ms for 3 probes

    async def go() -> SizePlanner:
        planner = SizePlanner(
            1,
            latency=LatencyModel(0.08, 0.008, cpu_s=0.002),
            limits=lambda: HostLimits(100, 900),
            expected=500,
            cpu_clock=lambda: next(clock),
        )
        planner.probing()  # what the run did before its probes (0.5 s here) is not counted
        planner.probing()  # the first call only
        await planner.size_for(480, [(1, 0.304), (1, 0.304), (3, 0.392)])
        return planner

    planner = asyncio.run(go())
    assert planner.plan is not None
    assert planner.latency.cpu_s == pytest.approx(0.01)
    assert planner.plan.figures()["request_cpu_seconds"] == pytest.approx(0.01)
    # 10 ms a request against the field report's curve: not 96 pages of 5
    assert planner.plan.per_page > 5
    # a clock that says less than the configured model: the model's stands
    low = iter([1.0, 1.0])

    async def floor() -> SizePlanner:
        p = SizePlanner(
            1,
            latency=LatencyModel(0.08, 0.008, cpu_s=0.002),
            limits=lambda: HostLimits(100, 900),
            expected=500,
            cpu_clock=lambda: next(low),
        )
        await p.size_for(480, [(1, 0.304), (3, 0.392)])
        return p

    assert asyncio.run(floor()).latency.cpu_s == 0.002


def test_a_ceiling_the_host_showed_bounds_the_plan_and_the_window() -> None:
    """GitHub documents 100 in flight; a host that refused above 20 (the ceiling the window
    learned, remembered per host in api_windows for the next run) is planned for 20, and
    the window is opened to the plan, never past the ceiling."""
    from ingest.rest.github import planner_for

    window = AdaptiveWindow(initial=4, maximum=100, ceiling=20)
    governor = RateLimitGovernor(reserve=10)
    planner = planner_for(Settings().rest, 1, window, governor)

    async def go() -> None:
        await planner.size_for(480, [(1, 0.088), (1, 0.088), (3, 0.104)])

    asyncio.run(go())
    assert planner.plan is not None and planner.plan.limits.in_flight == 20
    assert planner.plan.in_flight <= 20 and window.size <= 20
    assert planner.plan.per_page >= 24  # 480 in at most 20 pages at once
