"""Component tests of declared REST sources against the generic REST dev server
(``dev.servers.rest``), a real HTTP server on loopback: every paginator kind,
incremental runs, parent/child resources, a hidden in-flight ceiling, a request
quota, malformed pages. Rows are committed to real Delta tables and read back."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from dev.servers.rest import DevRest
from ingest import storage
from ingest.rest import store
from ingest.rest.config import RestConfig
from ingest.rest.errors import AuthError
from ingest.rest.records import RestSummary
from ingest.rest.run import fetch_source
from ingest.rest.source import Source, parse_source
from ingest.settings import Settings

API_KEY = "test-api-key-0123456789"  # fake
Server = Callable[..., DevRest]

PAGINATORS: dict[str, dict[str, Any]] = {
    "header_link": {"type": "header_link"},
    "page_number": {
        "type": "page_number",
        "base_page": 1,  # the dev server numbers its pages from 1 (dlt's default is 0)
        "page_size": 7,
        "total_path": "total_pages",
    },
    "offset": {"type": "offset", "limit": 7, "total_path": "total"},
    "cursor": {
        "type": "cursor",
        "cursor_path": "next_cursor",
        "page_size": 7,
        "page_size_param": "limit",
    },
    "header_cursor": {
        "type": "header_cursor",
        "cursor_key": "x-next-cursor",
        "page_size": 7,
        "page_size_param": "limit",
    },
    "json_link": {
        "type": "json_link",
        "next_url_path": "next",
        "page_size": 7,
        "page_size_param": "limit",
    },
}
SELECTOR = {"header_link": None, "header_cursor": None}


@pytest.fixture
def rest() -> Iterator[Server]:
    started: list[DevRest] = []

    def start(**config: Any) -> DevRest:
        config.setdefault("api_key", API_KEY)
        server = DevRest(**config).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


@pytest.fixture(autouse=True)
def _api_key() -> Iterator[None]:
    os.environ["TEST_REST_API_KEY"] = API_KEY
    yield
    os.environ.pop("TEST_REST_API_KEY", None)


def source_for(
    server: DevRest,
    paginator: str = "cursor",
    *,
    resources: list[dict[str, Any]] | None = None,
    auth: dict[str, Any] | None = None,
    concurrency: int = 32,
    totals: bool = True,
) -> Source:
    declared = dict(PAGINATORS[paginator])
    if not totals and "total_path" in declared:
        declared["total_path"] = None  # a total the server does not send is not declared
    spec = {
        "name": "tracker",
        "client": {
            "base_url": server.url,
            "auth": auth or {"type": "api_key", "name": "X-API-Key", "env": "TEST_REST_API_KEY"},
            "paginator": declared,
            "concurrency": concurrency,
            "rate_limit": {"backoff": 0.05, "max_wait": 30},
        },
        "resource_defaults": {
            "primary_key": "id",
            "endpoint": {"data_selector": SELECTOR.get(paginator, "data")},
        },
        "resources": resources or [{"name": "tickets", "endpoint": {"path": "tickets"}}],
    }
    return parse_source(json.dumps(spec), "test.yaml")


def settings_for(data_dir: Path, **kw: Any) -> Settings:
    rest = {"retry_base": 0.01, "retry_cap": 0.05, "max_attempts": 3, "timeout": 10.0}
    return Settings(data_dir=data_dir, rest={**rest, **kw.pop("rest", {})}, **kw)


def run(settings: Settings, source: Source, run_id: str, **kw: Any) -> RestSummary:
    summary = fetch_source(RestConfig.of(settings), source, run_id=run_id, **kw)
    storage.commit_run(settings.data_dir, run_id)  # as the flow's commit-run task does
    return summary


def ids(data_dir: Path, table: str = "tracker__tickets") -> list[int]:
    _, rows = storage.query(data_dir, f"SELECT data FROM {table}")
    return sorted(json.loads(d)["id"] for (d,) in rows)


def expected_ids(projects: int, per_project: int) -> list[int]:
    return sorted(
        p * 100_000 + n for p in range(1, projects + 1) for n in range(1, per_project + 1)
    )


@pytest.mark.parametrize("kind", list(PAGINATORS))
@pytest.mark.parametrize("totals", [True, False])
def test_every_paginator_kind_reads_every_record_once(
    rest: Server, data_dir: Path, kind: str, totals: bool
) -> None:
    server = rest(paginator=kind, totals=totals, projects=2, tickets_per_project=23)
    summary = run(settings_for(data_dir), source_for(server, kind, totals=totals), "r1")
    assert summary.complete and not summary.errors, summary.resources
    assert ids(data_dir) == expected_ids(2, 23)
    stats = server.stats()
    pages = -(-46 // (7 if kind != "header_link" else 20))
    # every page once (a listing without totals may ask for one empty page at the end)
    assert pages <= stats["requests"] <= pages + 1


def test_planned_pages_go_out_concurrently_and_cursors_in_sequence(
    rest: Server, data_dir: Path
) -> None:
    server = rest(paginator="offset", projects=4, tickets_per_project=50, latency_ms=30)
    run(settings_for(data_dir), source_for(server, "offset"), "r1")
    assert server.stats()["max_in_flight"] > 2  # total known: pages 2..N at once
    server = rest(paginator="cursor", projects=4, tickets_per_project=50, latency_ms=5)
    run(settings_for(data_dir / "b"), source_for(server, "cursor"), "r1")
    assert server.stats()["max_in_flight"] == 1  # each page names the next


def test_parent_child_one_listing_per_parent(rest: Server, data_dir: Path) -> None:
    server = rest(paginator="page_number", projects=5, tickets_per_project=12)
    resources = [
        {"name": "projects", "endpoint": {"path": "projects"}},
        {
            "name": "tickets",
            "endpoint": {"path": "projects/{resources.projects.id}/tickets"},
        },
    ]
    summary = run(
        settings_for(data_dir), source_for(server, "page_number", resources=resources), "r1"
    )
    assert summary.complete, summary.resources
    by_name = {r["resource"]: r for r in summary.resources}
    assert by_name["projects"]["records"] == 5 and by_name["tickets"]["listings"] == 5
    assert ids(data_dir, "tracker__projects") == [1, 2, 3, 4, 5]
    assert ids(data_dir) == expected_ids(5, 12)
    _, rows = storage.query(
        data_dir, "SELECT parent_key, count(*) FROM tracker__tickets GROUP BY 1 ORDER BY 1"
    )
    assert rows == [(str(p), 12) for p in range(1, 6)]


def test_incremental_since_param_fetches_only_what_changed(rest: Server, data_dir: Path) -> None:
    server = rest(paginator="cursor", projects=3, tickets_per_project=30)
    resources = [
        {"name": "projects", "endpoint": {"path": "projects"}},
        {
            "name": "tickets",
            "endpoint": {
                "path": "projects/{resources.projects.id}/tickets",
                "incremental": {"cursor_path": "updated_at", "start_param": "since"},
            },
        },
    ]
    source = source_for(server, "cursor", resources=resources)
    settings = settings_for(data_dir)
    first = run(settings, source, "r1")
    assert first.complete and ids(data_dir) == expected_ids(3, 30)
    server.touch(2, [5, 6], add=1)
    server.reset_stats()
    second = run(settings, source, "r2")
    assert second.complete
    got = {r["resource"]: r["records"] for r in second.resources}
    # each listing sends its own watermark as since (inclusive, as most APIs' is): its
    # newest record comes again, as stored (unchanged, not a row), plus, for project 2,
    # the two changed tickets and the new one
    assert got["tickets"] == 3
    assert {r["resource"]: r["unchanged"] for r in second.resources} == {
        "projects": 3,
        "tickets": 3,
    }
    _, rows = storage.query(
        data_dir, "SELECT data FROM tracker__tickets WHERE key IN ('2/200005', '2/200031')"
    )
    titles = sorted(json.loads(d)["title"] for (d,) in rows)
    assert titles == ["Ticket 31 of project 2 (updated)", "Ticket 5 of project 2 (updated)"]
    assert len(ids(data_dir)) == 91  # upserted by key: nothing duplicated


def test_incremental_desc_listing_stops_at_the_watermark(rest: Server, data_dir: Path) -> None:
    server = rest(paginator="page_number", projects=1, tickets_per_project=200)
    resources = [
        {
            "name": "tickets",
            "endpoint": {
                "path": "projects/1/tickets",
                "params": {"order": "desc"},
                "paginator": {
                    "type": "page_number",
                    "base_page": 1,
                    "page_size": 10,
                    "total_path": "total_pages",
                },
                "incremental": {"cursor_path": "updated_at", "row_order": "desc"},
            },
        }
    ]
    source = source_for(server, "page_number", resources=resources)
    settings = settings_for(data_dir)
    run(settings, source, "r1")
    assert server.stats()["requests"] == 20
    server.touch(1, [3, 150])
    server.reset_stats()
    second = run(settings, source, "r2")
    assert second.complete
    assert server.stats()["requests"] <= 3  # the top of the listing, not 20 pages
    assert len(ids(data_dir)) == 200


def test_hidden_in_flight_ceiling_is_found_with_few_limit_answers(
    rest: Server, data_dir: Path
) -> None:
    server = rest(
        paginator="offset",
        projects=8,
        tickets_per_project=250,
        max_in_flight=6,
        limit_retry_after=0.2,
        latency_ms=20,
    )
    source = source_for(server, "offset", concurrency=64)
    summary = run(settings_for(data_dir), source, "r1")
    stats = server.stats()
    assert summary.complete and ids(data_dir) == expected_ids(8, 250)
    requests = stats["requests"]
    assert stats.get("limited", 0) < 0.05 * requests, stats
    # found within one of the truth: the client counts a request as on the wire until its
    # answer arrives, the server until it sends it, so the two counts differ by the answers
    # in transit (a probe at 7 can pass, a limit can arrive with 5 counted)
    assert summary.ceiling is not None and 3 <= summary.ceiling <= 7
    # the next run starts at what the host allowed: no slow start, no overshoot; only
    # the rare probe above the known ceiling meets a limit answer
    server.reset_stats()
    again = run(settings_for(data_dir), source, "r2")
    stats2 = server.stats()
    assert again.complete
    assert stats2.get("limited", 0) <= min(stats["limited"], 0.02 * stats2["requests"]), stats2
    _, rows = storage.query(data_dir, "SELECT window_size, ceiling FROM api_windows")
    assert rows and 3 <= rows[0][1] <= 7 and rows[0][0] <= rows[0][1]  # kept for the next night


def test_request_quota_waits_for_the_reset_instead_of_failing(rest: Server, data_dir: Path) -> None:
    server = rest(
        paginator="offset", projects=1, tickets_per_project=140, quota=10, quota_window=1.0
    )
    summary = run(settings_for(data_dir), source_for(server, "offset"), "r1")
    stats = server.stats()
    assert summary.complete and ids(data_dir) == expected_ids(1, 140)
    assert stats["requests"] == 20 + stats.get("quota_limited", 0)
    assert stats.get("quota_limited", 0) <= 2  # the budget in the headers is obeyed


@pytest.mark.parametrize(
    ("kind", "fault", "expect"),
    [
        ("cursor", "bad_json", "not JSON"),
        ("cursor", "missing_records", "no list at data_selector 'data'"),
        ("offset", "missing_key", "has no primary key 'id'"),
        ("cursor", "repeat_cursor", "the cursor repeats"),
        ("header_cursor", "repeat_cursor", "the cursor repeats"),
        ("header_link", "repeat_cursor", "the cursor repeats"),
    ],
)
def test_malformed_pages_stop_with_a_clear_error(
    rest: Server, data_dir: Path, kind: str, fault: str, expect: str
) -> None:
    server = rest(
        paginator=kind,
        totals=False,
        projects=1,
        tickets_per_project=60,
        faults=[{"kind": fault, "match": "/tickets", "times": 99}],
    )
    summary = run(settings_for(data_dir), source_for(server, kind), "r1")
    assert summary.errors and expect in summary.errors[0][1], summary.errors
    assert not summary.complete
    assert server.stats()["requests"] <= 5  # stopped, not looping
    _, rows = storage.query(data_dir, "SELECT complete, stop_reason FROM rest_syncs")
    assert rows[0][0] is False and expect in rows[0][1]


def test_api_key_in_the_query_and_never_in_outputs(rest: Server, data_dir: Path) -> None:
    server = rest(paginator="cursor", projects=1, tickets_per_project=30)
    auth = {"type": "api_key", "name": "api_key", "location": "query", "env": "TEST_REST_API_KEY"}
    summary = run(settings_for(data_dir), source_for(server, "cursor", auth=auth), "r1")
    assert summary.complete and len(ids(data_dir)) == 30
    _, rows = storage.query(data_dir, "SELECT url FROM api_requests")
    assert rows and all(API_KEY not in url for (url,) in rows)


def test_rejected_or_missing_credentials_are_clear(rest: Server, data_dir: Path) -> None:
    server = rest(paginator="cursor", projects=1, tickets_per_project=5)
    os.environ["TEST_REST_API_KEY"] = "wrong-key-0123456789"
    with pytest.raises(AuthError) as info:
        run(settings_for(data_dir), source_for(server, "cursor"), "r1")
    assert "401" in str(info.value) and "TEST_REST_API_KEY" in str(info.value)
    assert "wrong-key-0123456789" not in str(info.value)
    del os.environ["TEST_REST_API_KEY"]
    with pytest.raises(AuthError, match="TEST_REST_API_KEY is empty or missing"):
        run(settings_for(data_dir), source_for(server, "cursor"), "r2")


def test_each_parent_keeps_its_own_cursor(rest: Server, data_dir: Path) -> None:
    """A child resource's cursor is per parent (``rest_syncs`` by source, resource and
    parent key): one parent's new records move its own cursor only, a parent whose
    listing fails keeps the cursor it had, and a new parent starts at ``initial_value``."""
    server = rest(paginator="cursor", projects=3, tickets_per_project=10)
    initial = "2025-01-01T03:00:00Z"  # tickets 1 and 2 of each project are older
    resources = [
        {"name": "projects", "endpoint": {"path": "projects"}},
        {
            "name": "tickets",
            "endpoint": {
                "path": "projects/{resources.projects.id}/tickets",
                "params": {"since": "{incremental.start_value}"},
                "incremental": {"cursor_path": "updated_at", "initial_value": initial},
            },
        },
    ]
    source = source_for(server, "cursor", resources=resources)
    settings = settings_for(data_dir)

    def cursors() -> dict[str, str]:
        """Each parent's cursor as the next run reads it."""
        state = store.load_state(settings.location, "tracker", {})
        return {p: json.loads(w) for (r, p), w in state.watermarks.items() if r == "tickets"}

    def sent(run_id: str) -> dict[str, str]:
        """The since each project's first ticket request of ``run_id`` sent."""
        _, rows = storage.query(
            data_dir, f"SELECT url FROM api_requests WHERE run_id = '{run_id}' ORDER BY 1"
        )
        out: dict[str, str] = {}
        for (url,) in rows:
            parsed = urlparse(url)
            parts = parsed.path.strip("/").split("/")
            if parts[-1] == "tickets" and "cursor" not in parse_qs(parsed.query):
                out.setdefault(parts[-2], parse_qs(parsed.query)["since"][0])
        return out

    assert run(settings, source, "r1").complete
    assert sent("r1") == {"1": initial, "2": initial, "3": initial}
    assert ids(data_dir) == sorted(p * 100_000 + n for p in (1, 2, 3) for n in range(3, 11))
    first = cursors()
    assert sorted(first) == ["1", "2", "3"] and len(set(first.values())) == 3

    server.touch(2, [4], add=1)  # project 2: one ticket updated, one new
    server.touch(3, [5])  # project 3 changed too, but its listing fails below
    server.touch(4, add=3)  # a new project
    server.configure(faults=[{"kind": "500", "match": "projects/3/tickets", "times": 100}])
    second = run(settings, source, "r2")
    tickets = next(r for r in second.resources if r["resource"] == "tickets")
    assert not tickets["complete"] and "projects/3/tickets" in tickets["note"]
    # every parent sent its own cursor; the new one the initial value
    assert sent("r2") == {"1": first["1"], "2": first["2"], "3": first["3"], "4": initial}
    after = cursors()
    assert after["1"] == first["1"]  # nothing new for project 1: its cursor stays
    assert after["2"] > first["2"]  # project 2's new records moved its own cursor
    assert after["3"] == first["3"]  # the failed listing advanced nothing
    assert after["4"] > initial
    _, rows = storage.query(
        data_dir, "SELECT count(*) FROM tracker__tickets WHERE parent_key = '4'"
    )
    assert rows == [(3,)]  # its tickets all newer than the initial value (touched)

    server.configure(faults=[])
    third = run(settings, source, "r3")
    assert third.complete
    assert sent("r3")["3"] == first["3"]  # the failed parent resumes from its old cursor
    _, rows = storage.query(data_dir, "SELECT data FROM tracker__tickets WHERE key = '3/300005'")
    assert json.loads(rows[0][0])["title"].endswith("(updated)")
    assert cursors()["3"] > first["3"] and cursors()["1"] == first["1"]
