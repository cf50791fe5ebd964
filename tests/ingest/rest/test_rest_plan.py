"""A declared (plain, no dialect) source whose file leaves the page size open gets the
page size and in-flight count planned from the latency its probes measure, as GitHub's
dialect does; a declared size is sent as declared, unprobed. Against the GitHub-compatible
server on loopback (``dev.servers.github``: ``Link`` headers, latency of a fixed part and
a part per item), read through the plain engine (``ingest.rest.run.fetch_source``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from dev.servers.github import DevGitHub
from dev.servers.rest import DevRest
from ingest import storage
from ingest.rest.config import RestConfig
from ingest.rest.records import RestSummary
from ingest.rest.run import fetch_source
from ingest.rest.source import Source
from ingest.settings import Settings

TOKEN = "ghp_" + "PlanTokenValue0123456789abcdefABCDEFG"  # fake


def source(paginator: dict[str, Any], params: dict[str, Any] | None = None) -> Source:
    return Source.model_validate(
        {
            "name": "plain",
            "client": {
                "base_url": "https://api.example.com/",
                "auth": {"type": "bearer", "env": "PLAN_TOKEN"},
                "paginator": paginator,
                "concurrency": 100,
            },
            "resources": [
                {
                    "name": "pulls",
                    "primary_key": "number",
                    "endpoint": {
                        "path": "repos/octo/big/pulls",
                        "params": {"state": "all", **(params or {})},
                    },
                }
            ],
        }
    )


def fetch(server: DevGitHub, data_dir: Path, src: Source) -> RestSummary:
    settings = Settings(data_dir=data_dir, rest={"retry_base": 0.01, "retry_cap": 0.05})
    summary = fetch_source(RestConfig.of(settings), src, run_id="r1", base_url=server.url)
    storage.commit_run(data_dir, "r1")
    return summary


def numbers(data_dir: Path) -> list[int]:
    _, rows = storage.query(data_dir, "SELECT data FROM plain__pulls")
    return sorted(json.loads(d)["number"] for (d,) in rows)


@pytest.mark.parametrize(
    ("base_ms", "item_ms", "small"),
    [(20.0, 40.0, True), (800.0, 0.0, False)],
    ids=["per-item-dominates", "fixed-part-dominates"],
)
@pytest.mark.parametrize(
    "paginator",
    [
        {"type": "header_link", "page_size": "auto", "page_size_param": "per_page"},
        {"type": "header_link", "page_size_param": "per_page"},
    ],
    ids=["auto", "param-without-size"],
)
def test_a_plain_source_leaving_its_page_size_open_gets_a_fitted_plan(
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    paginator: dict[str, Any],
    base_ms: float,
    item_ms: float,
    small: bool,
) -> None:
    """Small pages, many in flight where each item costs; large pages, few requests,
    where the page costs: the run's summary records the plan and its figures, and every
    pull request is stored once."""
    monkeypatch.setenv("PLAN_TOKEN", TOKEN)
    with DevGitHub(
        repos={"octo/big": 300},
        token=TOKEN,
        latency_base_ms=base_ms,
        latency_per_item_ms=item_ms,
    ) as server:
        summary = fetch(server, data_dir, source(paginator))
        stats = server.stats()
    assert summary.complete and numbers(data_dir) == list(range(1, 301))
    assert summary.size_plan_figures is not None and "pulls: per_page" in (summary.size_plan or "")
    plan = summary.size_plan_figures["pulls"]
    assert summary.resources[0]["page_size"] == plan["per_page"]
    _, synced = storage.query(data_dir, "SELECT page_size, complete FROM rest_syncs")
    assert synced == [(plan["per_page"], True)]  # the listing's row names the planned size
    assert plan["requests"] == -(-300 // plan["per_page"])
    assert plan["host_in_flight"] == 100 and plan["samples"] == 3
    assert plan["parallel"] is True and plan["request_cpu_seconds"] > 0
    # the probes, then page 1 and the rest at once at the planned size, nothing else
    assert stats["max_in_flight"] <= max(plan["in_flight"], 3)
    assert summary.requests == 3 + plan["requests"]
    if small:
        assert plan["per_page"] <= 10 and plan["in_flight"] >= 30
        assert plan["item_seconds"] > 0.01  # the fit saw the time per item (40 ms)
    else:
        assert plan["per_page"] >= 15 and plan["in_flight"] <= 20


def test_a_declared_size_is_sent_as_declared_and_not_probed(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLAN_TOKEN", TOKEN)
    declared = source({"type": "header_link", "page_size_param": "per_page"}, {"per_page": 50})
    with DevGitHub(repos={"octo/big": 300}, token=TOKEN) as server:
        summary = fetch(server, data_dir, declared)
    assert summary.complete and numbers(data_dir) == list(range(1, 301))
    assert summary.size_plan is None and summary.size_plan_figures is None
    assert summary.requests == 6  # 300 at 50 a page: no probe


def test_an_incremental_rerun_is_not_probed(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first run probes and plans; the next one reads only down to its watermark (the
    listing's size says nothing of that), so it is not probed: no plan, no probe requests."""
    monkeypatch.setenv("PLAN_TOKEN", TOKEN)
    src = source(
        {"type": "header_link", "page_size": "auto", "page_size_param": "per_page"},
        {"sort": "updated", "direction": "desc"},
    )
    declared = src.model_dump(exclude_none=True)
    declared["resources"][0]["endpoint"]["incremental"] = {
        "cursor_path": "updated_at",
        "row_order": "desc",
    }
    src = Source.model_validate(declared)
    settings = Settings(data_dir=data_dir, rest={"retry_base": 0.01, "retry_cap": 0.05})
    with DevGitHub(repos={"octo/big": 120}, token=TOKEN) as server:
        first = fetch_source(RestConfig.of(settings), src, run_id="r1", base_url=server.url)
        storage.commit_run(data_dir, "r1")
        second = fetch_source(RestConfig.of(settings), src, run_id="r2", base_url=server.url)
    assert first.complete and first.size_plan is not None
    assert second.complete and second.size_plan is None
    assert second.requests == 1  # page 1 only: it reaches the watermark


@pytest.mark.parametrize(
    ("kind", "paginator"),
    [
        (
            "page_number",
            {"type": "page_number", "base_page": 1, "total_path": "total_pages"},
        ),
        ("offset", {"type": "offset", "total_path": "total"}),
    ],
)
def test_page_number_and_offset_sources_are_planned_from_their_totals(
    data_dir: Path, kind: str, paginator: dict[str, Any]
) -> None:
    """A total of pages (asked at one record a page: the records) or of records tells the
    listing's size; the probes' latency (20 ms a page + 40 ms a record) asks for small
    pages, many at once, which ``dev.servers.rest`` answers (its default is 20 a page)."""
    key = "plan-key-0123456789"  # fake
    with DevRest(
        api_key=key,
        paginator=kind,
        projects=2,
        tickets_per_project=60,
        latency_ms=20,
        latency_per_item_ms=40,
    ) as server:
        declared = {
            "name": "tracker",
            "client": {
                "base_url": server.url,
                "auth": {"type": "api_key", "name": "X-API-Key", "env": "PLAN_REST_KEY"},
                "paginator": {**paginator, "page_size": "auto"},
                "concurrency": 64,
            },
            "resources": [
                {
                    "name": "tickets",
                    "primary_key": "id",
                    "endpoint": {"path": "tickets", "data_selector": "data"},
                }
            ],
        }
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("PLAN_REST_KEY", key)
            settings = Settings(data_dir=data_dir, rest={"retry_base": 0.01, "retry_cap": 0.05})
            summary = fetch_source(
                RestConfig.of(settings), Source.model_validate(declared), run_id="r1"
            )
        stats = server.stats()
    storage.commit_run(data_dir, "r1")
    _, rows = storage.query(data_dir, "SELECT data FROM tracker__tickets")
    assert summary.complete and len(rows) == 120
    assert len({json.loads(d)["id"] for (d,) in rows}) == 120
    assert summary.size_plan_figures is not None
    plan = summary.size_plan_figures["tickets"]
    assert plan["items"] == 120 and plan["parallel"] is True
    assert plan["per_page"] <= 10 and plan["requests"] == -(-120 // plan["per_page"])
    assert stats["max_in_flight"] > 3  # pages after the first at once
