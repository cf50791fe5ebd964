"""Hostile or broken APIs, against real servers on loopback: a redirect to another origin
gets no credential the client added (header, query parameter, bearer token); an oversized
page, a ``rel="last"`` or total announcing 10^9 pages and JSON nested 100,000 deep each
end one listing with a clear reason, never the run, and never build 10^9 URLs."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dev.servers.rest import DevRest
from ingest import storage
from ingest.rest.client import RestClient
from ingest.rest.config import RestConfig
from ingest.rest.errors import HopRefusedError, PageTooLargeError
from ingest.rest.ratelimit import RateLimitGovernor, RetryPolicy
from ingest.rest.records import RestSummary
from ingest.rest.run import fetch_source
from ingest.rest.source import Source, parse_source
from ingest.rest.transport import make_http
from ingest.security import endpoint_of
from ingest.settings import Settings
from tests.scripted_server import Answer, ScriptedServer

API_KEY = "hostile-test-key-0123456789"  # fake
TOKEN = "ghp_" + "h" * 36  # fake


def bearer(token: str | None) -> dict[str, str] | None:
    """The header GitHub's dialect sends its token in."""
    return {"Authorization": f"Bearer {token}"} if token else None


@pytest.fixture(autouse=True)
def _api_key() -> Iterator[None]:
    os.environ["TEST_HOSTILE_API_KEY"] = API_KEY
    yield
    os.environ.pop("TEST_HOSTILE_API_KEY", None)


@pytest.fixture
def recorder() -> Iterator[ScriptedServer]:
    """Another origin (another port) that records whatever reaches it."""
    with ScriptedServer() as server:
        page = json.dumps({"data": [{"id": 1}], "next_cursor": None}).encode()
        server.script("/tickets", Answer(200, page))
        yield server


# Two resources of one source: a fault on one listing must not cost the other.
TICKETS_AND_PROJECTS = [
    {"name": "tickets", "endpoint": {"path": "tickets"}},
    {"name": "projects", "endpoint": {"path": "projects"}},
]


def source_for(
    url: str,
    *,
    paginator: dict[str, Any] | None = None,
    selector: str | None = "data",
    auth: dict[str, Any] | None = None,
    max_pages: int = 100_000,
    resources: list[dict[str, Any]] | None = None,
) -> Source:
    spec = {
        "name": "tracker",
        "client": {
            "base_url": url,
            "auth": auth or {"type": "api_key", "name": "X-API-Key", "env": "TEST_HOSTILE_API_KEY"},
            "paginator": paginator or {"type": "cursor", "cursor_path": "next_cursor"},
            "rate_limit": {"backoff": 0.05, "max_wait": 30},
        },
        "resource_defaults": {"primary_key": "id", "endpoint": {"data_selector": selector}},
        "resources": resources
        or [{"name": "tickets", "endpoint": {"path": "tickets"}, "max_pages": max_pages}],
    }
    return parse_source(json.dumps(spec), "hostile.yaml")


def run(data_dir: Path, source: Source, **settings: Any) -> RestSummary:
    rest = {"retry_base": 0.01, "retry_cap": 0.05, "max_attempts": 2, **settings.pop("rest", {})}
    config = RestConfig.of(Settings(data_dir=data_dir, rest=rest, **settings))
    summary = fetch_source(config, source, run_id="r1")
    storage.commit_run(data_dir, "r1")
    return summary


def everything_sent(server: ScriptedServer) -> str:
    return json.dumps([server.targets, [headers for _, headers in server.seen]])


@pytest.mark.parametrize("location", ["header", "query"])
def test_a_cross_origin_redirect_gets_no_api_key(
    data_dir: Path, recorder: ScriptedServer, location: str
) -> None:
    auth = {
        "type": "api_key",
        "name": "api_key",
        "location": location,
        "env": "TEST_HOSTILE_API_KEY",
    }
    if location == "header":
        auth["name"] = "X-API-Key"
    faults = [{"kind": "redirect", "match": "/tickets", "to": recorder.url, "times": 99}]
    with DevRest(api_key=API_KEY, projects=1, faults=faults) as api:
        # the other origin is one the operator allows (else the hop is refused, below)
        summary = run(data_dir, source_for(api.url, auth=auth), allowed_hosts=[recorder.url])
    assert recorder.targets, "the redirect was not followed"
    assert recorder.targets[0].startswith("/tickets")
    sent = everything_sent(recorder)
    assert API_KEY not in sent, sent
    assert "x-api-key" not in sent.lower()
    assert summary.complete, summary.errors  # the other origin's page was read
    _, urls = storage.query(data_dir, "SELECT url FROM api_requests")
    assert all(API_KEY not in u for (u,) in urls)


def test_a_same_origin_redirect_keeps_the_credential(data_dir: Path) -> None:
    """The origin's own redirect (a moved path) still authenticates: nothing is lost."""
    with DevRest(api_key=API_KEY, projects=1, tickets_per_project=30) as api:
        api.post(
            "/_dev/config", {"faults": [{"kind": "redirect", "match": "/tickets", "to": api.url}]}
        )
        summary = run(data_dir, source_for(api.url))
        stats = api.stats()
    assert summary.complete, summary.errors
    assert stats["fault redirect"] == 1 and stats.get("401", 0) == 0
    _, rows = storage.query(data_dir, "SELECT count(*) FROM tracker__tickets")
    assert rows == [(30,)]


def test_a_bearer_token_stays_on_its_origin(recorder: ScriptedServer) -> None:
    recorder.script("/elsewhere", Answer(200, b"[]"))
    with ScriptedServer() as origin:
        origin.script(
            "/repos/o/r/pulls",
            Answer(302, headers={"Location": f"{recorder.url}/elsewhere?x=1"}),
        )
        origin.script("/moved", Answer(302, headers={"Location": "/repos/o/r/pulls2"}))
        origin.script("/repos/o/r/pulls2", Answer(200, b"[1]"))

        async def get(path: str) -> Any:
            http = make_http(
                origin.url, headers={}, concurrency=2, timeout=5.0, credentials=bearer(TOKEN)
            )
            async with http:
                gh = RestClient(
                    http,
                    RateLimitGovernor(),
                    RetryPolicy(max_attempts=1),
                    allowed_hops=frozenset({endpoint_of(recorder.url)}),
                )
                return (await gh.get(path)).data

        assert asyncio.run(get("/repos/o/r/pulls")) == []
        assert asyncio.run(get("/moved")) == [1]
        same = dict(origin.seen)["/repos/o/r/pulls2"]
    assert TOKEN not in everything_sent(recorder)
    assert "authorization" not in everything_sent(recorder).lower()
    assert same.get("Authorization") == f"Bearer {TOKEN}"


def test_an_oversized_page_is_a_failed_page(data_dir: Path) -> None:
    big = 3 * 1024 * 1024
    faults = [{"kind": "huge_body", "match": "/tickets", "size": big, "times": 99}]
    with DevRest(api_key=API_KEY, projects=1, faults=faults) as api:
        summary = run(
            data_dir,
            source_for(api.url, resources=TICKETS_AND_PROJECTS),
            http={"max_page_bytes": 1024 * 1024},
        )
        stats = api.stats()
    assert not summary.complete and summary.failed_pages == 1
    assert "larger than 1,048,576 bytes" in _stop_reason(data_dir)
    assert stats["fault huge_body"] == 1  # not retried: the same page would be as large
    _, rows = storage.query(data_dir, "SELECT count(*) FROM tracker__projects")
    assert rows == [(1,)]  # the other resource of the run was read


def test_the_cap_is_checked_while_streaming() -> None:
    """The error comes from the stream, before the body is whole (a chunked body with no
    length the client could have checked up front)."""
    faults = [{"kind": "huge_body", "match": "/tickets", "size": 2 * 1024 * 1024}]
    with DevRest(projects=1, faults=faults) as api:

        async def get() -> None:
            http = make_http(
                api.url, headers={}, concurrency=1, timeout=5.0, credentials=bearer(None)
            )
            async with http:
                gh = RestClient(http, RateLimitGovernor(), max_page_bytes=64 * 1024)
                await gh.get("/tickets")
                raise AssertionError("read a body past the cap")

        with pytest.raises(PageTooLargeError, match="larger than 65,536 bytes"):
            asyncio.run(get())


@pytest.mark.parametrize(
    "paginator",
    [
        {"type": "header_link"},
        {"type": "page_number", "page_size": 5, "total_path": "total_pages"},
        {"type": "offset", "limit": 5, "total_path": "total"},
    ],
    ids=lambda p: p["type"],
)
def test_a_huge_page_count_is_clamped_to_max_pages(
    data_dir: Path, paginator: dict[str, Any]
) -> None:
    faults = [{"kind": "huge_total", "match": "/tickets", "pages": 10**9, "times": 1}]
    selector = None if paginator["type"] == "header_link" else "data"
    with DevRest(
        api_key=API_KEY,
        projects=1,
        tickets_per_project=40,
        paginator=paginator["type"],
        default_page_size=5,
        faults=faults,
    ) as api:
        summary = run(
            data_dir, source_for(api.url, paginator=paginator, selector=selector, max_pages=20)
        )
        stats = api.stats()
    assert stats["requests"] == 20  # page 1 and 19 planned ones, not 10^9
    assert not summary.complete
    assert "max_pages=20" in _stop_reason(data_dir)
    _, rows = storage.query(data_dir, "SELECT count(*) FROM tracker__tickets")
    assert rows == [(40,)]  # what the pages held is kept


def _stop_reason(data_dir: Path, resource: str = "tickets") -> str:
    sql = f"SELECT stop_reason FROM rest_syncs WHERE resource = '{resource}'"
    _, rows = storage.query(data_dir, sql)
    return str(rows[0][0])


def test_json_nested_100000_deep_fails_its_listing_not_the_run(data_dir: Path) -> None:
    faults = [{"kind": "deep_json", "match": "/tickets", "depth": 100_000, "times": 99}]
    with DevRest(api_key=API_KEY, projects=2, faults=faults) as api:
        summary = run(
            data_dir,
            source_for(api.url, resources=TICKETS_AND_PROJECTS),
        )
    assert not summary.complete
    assert "not JSON" in _stop_reason(data_dir) and "recursion" in _stop_reason(data_dir)
    _, rows = storage.query(data_dir, "SELECT count(*) FROM tracker__projects")
    assert rows == [(2,)]


def test_a_location_repeating_the_key_loses_it_on_another_origin(recorder: ScriptedServer) -> None:
    """A careless (or hostile) API echoes the key into the next URL: the client sends no
    parameter holding a credential of its own to another origin, whatever its name."""
    from ingest.rest.client import RestClient
    from ingest.rest.transport import make_http

    recorder.script("/next", Answer(200, b"[]"))
    with ScriptedServer() as origin:
        location = f"{recorder.url}/next?k={API_KEY}&token=Bearer+{API_KEY}&page=2"
        origin.script("/first", Answer(302, headers={"Location": location}))

        async def get() -> Any:
            creds = {"X-API-Key": API_KEY}
            http = make_http(origin.url, headers={}, concurrency=1, timeout=5.0, credentials=creds)
            allowed = frozenset({endpoint_of(recorder.url)})
            async with http:
                client = RestClient(http, RateLimitGovernor(), allowed_hops=allowed)
                return (await client.get("/first")).data

        assert asyncio.run(get()) == []
        assert dict(origin.seen)["/first"].get("X-API-Key") == API_KEY  # its own origin
    assert recorder.targets == ["/next?page=2"]
    assert API_KEY not in everything_sent(recorder)


# --- time bounds on what an API controls ---------------------------------------------


def _page(n: int, cursor: str | None) -> bytes:
    return json.dumps({"data": [{"id": n}], "next_cursor": cursor}).encode()


def test_a_retry_after_of_a_day_fails_its_page_and_holds_nothing(data_dir: Path) -> None:
    """A 429 asking for 86,400 s: the page is given up at once, saying what was asked;
    the source's other listing, on the same client, is read without a pause."""
    with ScriptedServer() as api:
        api.script("/tickets", Answer(429, b"{}", headers={"Retry-After": "86400"}))
        api.script("/projects", Answer(200, _page(1, None)))
        summary = run(data_dir, source_for(api.url, resources=TICKETS_AND_PROJECTS))
        tickets = [t for t in api.targets if t.startswith("/tickets")]
    assert not summary.complete
    reason = _stop_reason(data_dir)
    assert "asked to wait 86400 s (Retry-After), beyond max_retry_after 300 s" in reason
    assert len(tickets) == 1  # not asked again: nothing to wait for
    _, rows = storage.query(data_dir, "SELECT count(*) FROM tracker__projects")
    assert rows == [(1,)]


def test_a_retry_after_within_the_cap_is_obeyed(data_dir: Path) -> None:
    with ScriptedServer() as api:
        api.script(
            "/tickets",
            Answer(429, b"{}", headers={"Retry-After": "0"}),
            Answer(200, _page(1, None)),
        )
        summary = run(data_dir, source_for(api.url), http={"max_retry_after": 0})
    assert summary.complete  # 0 s asked, 0 s allowed: paused, then read


def test_a_body_dribbled_a_byte_at_a_time_is_cut_at_the_deadline(data_dir: Path) -> None:
    """httpx's timeout is per read: a byte every 0.3 s never trips a 5 s read timeout.
    The whole answer has a deadline: the attempt is a timeout, and after its retries the
    listing is incomplete, naming the deadline."""
    body = _page(1, None) + b" " * 200  # valid JSON, ~60 s at this pace
    with ScriptedServer() as api:
        api.script("/tickets", Answer(200, body, dribble=0.3))
        summary = run(
            data_dir,
            source_for(api.url),
            rest={"timeout": 5.0},
            http={"body_deadline": 1.5},
        )
        asked = len(api.targets)
    assert not summary.complete
    assert "no whole answer within 1.5 s (body_deadline)" in _stop_reason(data_dir)
    assert asked == 2  # rest_max_attempts=2: the cut attempt was retried once, then given up


def test_a_listing_that_never_ends_stops_at_max_pages_incomplete(data_dir: Path) -> None:
    """A cursor that names a new page for ever stops at the resource's ``max_pages``, and
    the listing says so: it is not complete. The default bound is the engine's."""
    from ingest.rest import engine, paging

    with ScriptedServer() as api:
        api.script("/tickets", *[Answer(200, _page(n, f"c{n}")) for n in range(1, 40)])
        summary = run(data_dir, source_for(api.url, max_pages=25))
        asked = len(api.targets)
    assert not summary.complete
    assert "stopped at max_pages=25" in _stop_reason(data_dir)
    assert asked == 25
    spec = {
        "name": "plain",
        "client": {"base_url": "http://127.0.0.1:9/"},
        "resources": [{"name": "things", "endpoint": {"path": "things"}}],
    }
    default = parse_source(json.dumps(spec), "plain.yaml").resources[0].max_pages
    walk_default = inspect.signature(engine.walk).parameters["max_pages"].default
    assert default == walk_default == paging.MAX_PLANNED <= 10_000


# --- hops to other hosts ----------------------------------------------------------------


@pytest.mark.parametrize("how", ["redirect", "link", "next_url"])
def test_a_hop_to_a_host_not_allowed_is_refused_before_any_request(
    data_dir: Path, recorder: ScriptedServer, how: str
) -> None:
    """A 302, a ``Link: rel="next"`` or a body's next URL naming another host (here
    another port of loopback, as a metadata address or a private service would be) is
    refused: that host sees no request, nothing it says is stored, the listing is
    incomplete naming the host, and the source's other listing is read."""
    target = f"{recorder.url}/tickets?page=2"
    first = {"data": [{"id": 1}], "next": target if how == "next_url" else None}
    with ScriptedServer() as api:
        if how == "redirect":
            api.script("/tickets", Answer(302, headers={"Location": target}))
        elif how == "link":
            link = {"Link": f'<{target}>; rel="next"'}
            api.script("/tickets", Answer(200, json.dumps(first).encode(), headers=link))
        else:
            api.script("/tickets", Answer(200, json.dumps(first).encode()))
        api.script("/projects", Answer(200, _page(7, None)))
        paginator = {
            "redirect": {"type": "cursor", "cursor_path": "next_cursor"},
            "link": {"type": "header_link"},
            "next_url": {"type": "json_link", "next_url_path": "next"},
        }[how]
        summary = run(
            data_dir, source_for(api.url, paginator=paginator, resources=TICKETS_AND_PROJECTS)
        )
    assert recorder.targets == []  # no request reached the other host
    assert not summary.complete
    port = recorder.url.rsplit(":", 1)[1]
    assert f"sent the client to 127.0.0.1:{port}, which this source may not reach" in (
        _stop_reason(data_dir)
    )
    _, rows = storage.query(data_dir, "SELECT count(*) FROM tracker__projects")
    assert rows == [(1,)]
    table = storage.open_table(data_dir, "tracker__tickets")
    if how != "redirect":  # the first page was the API's own: kept
        _, ids = storage.query(data_dir, "SELECT id FROM tracker__tickets")
        assert ids == [(1,)]
    else:
        assert table is None


class LoopbackOnly(httpx.AsyncBaseTransport):
    """The real transport, for loopback only: a request to any other address is kept here
    and never sent, so a broken hop check cannot send this test's traffic off the machine."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.stopped: list[str] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host not in ("127.0.0.1", "localhost", "::1"):
            self.stopped.append(str(request.url))
            raise httpx.ConnectError("not sent: off loopback", request=request)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",  # cloud metadata
        "http://[fd00:ec2::254]/latest/meta-data/",  # the same, over IPv6
        "http://10.0.0.5:8080/internal",
        "http://192.168.1.1/admin",
        "http://172.16.0.1/",
        "http://localhost:9/",
    ],
)
def test_a_redirect_to_metadata_private_or_loopback_addresses_is_refused(target: str) -> None:
    """The review's probe: a 302 to a link-local metadata address was followed and its
    answer stored. Each such address (and another port of loopback) is refused before
    any request to it, with the source's credential or without."""
    with ScriptedServer() as api:
        api.script("/tickets", Answer(302, headers={"Location": target}))
        guard = LoopbackOnly()

        async def get() -> None:
            http = make_http(
                api.url,
                headers={},
                concurrency=1,
                timeout=5.0,
                transport=guard,
                credentials=bearer(TOKEN),
            )
            async with http:
                client = RestClient(http, RateLimitGovernor(), RetryPolicy(max_attempts=1))
                await client.get("/tickets")

        with pytest.raises(HopRefusedError, match="which this source may not reach"):
            asyncio.run(get())
        assert [path for path, _headers in api.seen] == ["/tickets"]
    assert guard.stopped == []  # refused by the client, not by this test's guard


def test_a_hop_to_an_allowed_host_is_followed(data_dir: Path, recorder: ScriptedServer) -> None:
    """``INGEST_ALLOWED_HOSTS`` names the hosts an API may send the client to."""
    with ScriptedServer() as api:
        link = {"Link": f'<{recorder.url}/tickets?page=2>; rel="next"'}
        api.script("/tickets", Answer(200, _page(1, None), headers=link))
        summary = run(
            data_dir,
            source_for(api.url, paginator={"type": "header_link"}),
            allowed_hosts=[recorder.url],
        )
    assert summary.complete, summary.errors
    assert recorder.targets == ["/tickets?page=2"]


# --- smaller doors ---------------------------------------------------------------------


def test_a_github_answer_without_number_fails_its_listing_not_the_run(data_dir: Path) -> None:
    """A hostile or broken GitHub-like API answers items without ``number``: that
    repository's listing is incomplete, naming the item; the other repository is read."""
    from ingest.rest.github import fetch_pulls

    good = [{"number": 1, "id": 11, "updated_at": "2025-01-01T00:00:00Z"}]
    bad = [{"id": 12, "title": "no number", "updated_at": "2025-01-01T00:00:00Z"}]
    with ScriptedServer() as api:
        api.script("/repos/o/good/pulls", Answer(200, json.dumps(good).encode()))
        api.script("/repos/o/bad/pulls", Answer(200, json.dumps(bad).encode()))
        settings = Settings(
            data_dir=data_dir,
            github={"base_url": api.url},
            rest={"max_attempts": 1, "timeout": 5.0},
        )
        summary = fetch_pulls(
            RestConfig.of(settings), ["o/good", "o/bad"], run_id="r1", token=TOKEN
        )
        storage.commit_run(data_dir, "r1")
    assert not summary.complete
    said = json.dumps(summary.repos, default=str)
    assert "item 0 is not a pull request (no 'number')" in said, said
    _, rows = storage.query(data_dir, "SELECT repo, number FROM pull_requests")
    assert rows == [("o/good", 1)]
