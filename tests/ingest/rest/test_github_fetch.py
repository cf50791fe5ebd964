"""The GitHub source against a real GitHub-compatible HTTP server on loopback
(``dev.servers.github`` in its own process), real Parquet files and DuckDB.
No Prefect here (see test_github_flow.py)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pytest

from dev.servers.github import DevGitHub
from ingest import storage
from ingest.rest.config import RestConfig
from ingest.rest.errors import AuthError
from ingest.rest.github import fetch_pulls
from ingest.rest.records import GitHubSummary
from ingest.rest.summary import markdown
from ingest.settings import Settings

TOKEN = "ghp_" + "TestTokenValue0123456789abcdefABCDEF"  # fake, built so no scanner flags it
Server = Callable[..., DevGitHub]


@pytest.fixture
def github() -> Iterator[Server]:
    """Start servers with a given config; all are stopped after the test."""
    started: list[DevGitHub] = []

    def start(**config: Any) -> DevGitHub:
        config.setdefault("token", TOKEN)
        server = DevGitHub(**config).__enter__()
        started.append(server)
        return server

    yield start
    for server in started:
        server.__exit__(None, None, None)


# github_source's options (the source's own knobs); the other keywords are settings
OPTIONS = {"per_page", "concurrency", "rate_limit_reserve", "max_wait", "backoff", "limit_retries"}


@dataclass(frozen=True)
class Setup:
    """The settings of a run and the options of its GitHub source (``github_source``)."""

    settings: Settings
    options: dict[str, Any]


def settings_for(server: DevGitHub, data_dir: Path, **kw: Any) -> Setup:
    defaults: dict[str, Any] = {"backoff": 0.05, "max_wait": 0.0, "rate_limit_reserve": 10}
    given = {**defaults, **kw}
    rest = {"retry_base": 0.01, "retry_cap": 0.05, "timeout": 5.0, **given.pop("rest", {})}
    return Setup(
        Settings(
            data_dir=data_dir,
            github={"base_url": server.url},
            rest=rest,
            **{k: v for k, v in given.items() if k not in OPTIONS},
        ),
        {k: v for k, v in given.items() if k in OPTIONS},
    )


def run(setup: Setup, repos: list[str], run_id: str, **kw: Any) -> GitHubSummary:
    summary = fetch(setup, repos, run_id=run_id, token=TOKEN, **kw)
    storage.commit_run(setup.settings.data_dir, run_id)  # as the flow's commit-run task does
    return summary


def fetch(setup: Setup, repos: list[str], **kw: Any) -> GitHubSummary:
    return fetch_pulls(RestConfig.of(setup.settings), repos, **setup.options, **kw)


def sql(data_dir: Path, query: str) -> list[tuple[Any, ...]]:
    tables = {
        "pull_requests": "pull_request_log",  # every stored row, across runs
        "api_requests": "api_requests",
        "github_syncs": "github_syncs",
        "github_pages": "github_pages",
    }
    with duckdb.connect() as con:
        for t, source in tables.items():
            con.execute(f"CREATE VIEW {t}_all AS SELECT * FROM {storage.scan(data_dir, source)}")
        return con.execute(query).fetchall()


def numbers(data_dir: Path, repo: str) -> list[int]:
    """Every stored row's number for ``repo`` across all runs, sorted (duplicates kept)."""
    return sorted(
        n for (n,) in sql(data_dir, f"SELECT number FROM pull_requests_all WHERE repo = '{repo}'")
    )


def test_every_pull_request_exactly_once_within_the_in_flight_limit(
    github: Server, data_dir: Path
) -> None:
    server = github(repos={"octo/big": 480, "octo/small": 35, "octo/empty": 0})
    settings = settings_for(server, data_dir, concurrency=8)
    summary = run(settings, ["octo/big", "octo/small", "octo/empty"], "r1")
    assert summary.complete and not summary.errors and summary.failed_pages == 0
    assert numbers(data_dir, "octo/big") == list(range(1, 481))
    assert numbers(data_dir, "octo/small") == list(range(1, 36))
    assert numbers(data_dir, "octo/empty") == []
    stats = server.stats()
    assert stats["max_in_flight"] <= 8 and summary.max_in_flight <= 8
    assert stats.get("secondary", 0) == 0 and stats.get("primary_limited", 0) == 0
    # all but the final look at page 1 of a repository read in several pages (a 304
    # unless the listing changed meanwhile, free of the budget); the one-item probe of
    # each repository counts
    assert stats["not_modified"] == 1  # octo/big (octo/small fits one page)
    assert summary.budget_spent == stats["counted"] == summary.requests - 1
    # the warehouse view: one row per (repo, number)
    rows = storage.query(
        data_dir, "SELECT count(*), count(DISTINCT (repo, number)) FROM pull_requests"
    )[1]
    assert rows == [(515, 515)]
    labels, merged = sql(
        data_dir,
        "SELECT list_count(labels), merged_at IS NOT NULL FROM pull_requests_all "
        "WHERE repo = 'octo/small' AND number = 9",
    )[0]
    assert labels == 1 and merged is True


def test_explicit_per_page_is_capped_like_github(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/big": 250})
    summary = run(settings_for(server, data_dir, per_page=100), ["octo/big"], "r1")
    assert summary.repos[0]["pages"] == 3 and numbers(data_dir, "octo/big") == list(range(1, 251))


def test_rerun_with_nothing_changed_spends_no_budget(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/big": 300, "octo/small": 20})
    settings = settings_for(server, data_dir)
    first = run(settings, ["octo/big", "octo/small"], "r1")
    assert first.complete and first.budget_spent > 2
    server.reset_stats()
    again = run(settings, ["octo/big", "octo/small"], "r2")
    stats = server.stats()
    assert again.complete and again.budget_spent == 0 and again.pulls == 0
    assert stats.get("counted", 0) == 0 and stats["not_modified"] == 2  # page 1 of each
    assert stats["remaining"]["authenticated"] == 5000 - first.budget_spent
    cached = sql(
        data_dir, "SELECT count(*) FROM api_requests_all WHERE run_id = 'r2' AND from_cache"
    )
    assert cached == [(2,)]


def test_incremental_run_reads_only_down_to_the_watermark(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/big": 480})
    settings = settings_for(server, data_dir, per_page=20)
    assert run(settings, ["octo/big"], "r1").complete
    server.touch("octo/big", [5, 400], add=1)
    server.reset_stats()
    summary = run(settings, ["octo/big"], "r2")
    assert summary.complete
    assert server.stats()["counted"] <= 3  # page 1 (changed), then a wave of 1 that crosses
    assert {
        n for (n,) in sql(data_dir, "SELECT number FROM pull_requests_all WHERE run_id = 'r2'")
    } >= {5, 400, 481}
    titles = dict(
        storage.query(
            data_dir, "SELECT number, title FROM pull_requests WHERE number IN (5, 400, 6)"
        )[1]
    )
    assert titles[5].endswith("(updated)") and titles[400].endswith("(updated)")
    assert not titles[6].endswith("(updated)")
    assert storage.query(data_dir, "SELECT count(*) FROM pull_requests")[1] == [(481,)]


def test_budget_never_below_reserve_then_stop_and_resume(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/big": 480})
    server.set_budget(limit=1000, remaining=40, reset_in=3600)
    settings = settings_for(server, data_dir, per_page=10, rate_limit_reserve=15)
    first = run(settings, ["octo/big"], "r1")
    # stopped cleanly: what was fetched is stored, the watermark did not advance
    assert not first.complete and first.stopped and "beyond max_wait" in first.stopped
    assert server.stats()["remaining"]["authenticated"] == 15
    lowest = sql(data_dir, "SELECT min(rate_remaining) FROM api_requests_all")[0][0]
    assert lowest >= 15
    fetched = numbers(data_dir, "octo/big")
    assert len(fetched) == 250 == len(set(fetched))  # 25 pages of 10
    sync = sql(data_dir, "SELECT complete, watermark, stop_reason FROM github_syncs_all")
    assert sync[0][0] is False and sync[0][1] is None and "rate limit" in sync[0][2]

    server.set_budget(limit=1000, remaining=1000, reset_in=3600)  # the hour has passed
    server.reset_stats()
    second = run(settings, ["octo/big"], "r2")
    assert second.complete and not second.stopped
    stats = server.stats()
    # the pages fetched before answer 304, free, and so does the final look at page 1
    assert stats["not_modified"] == 25 + 1
    assert stats["counted"] == 23  # only the 23 pages not fetched before
    assert sorted(set(numbers(data_dir, "octo/big"))) == list(range(1, 481))
    assert storage.query(data_dir, "SELECT count(*) FROM pull_requests")[1] == [(480,)]


def test_waits_for_the_primary_reset_when_within_max_wait(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/small": 50})
    server.set_budget(limit=1000, remaining=12, reset_in=1)
    settings = settings_for(server, data_dir, per_page=5, rate_limit_reserve=10, max_wait=30)
    summary = run(settings, ["octo/small"], "r1")
    assert summary.complete and numbers(data_dir, "octo/small") == list(range(1, 51))


def test_retries_502_and_hangs_then_completes(github: Server, data_dir: Path) -> None:
    server = github(
        repos={"octo/big": 200},
        faults=[
            {"kind": "502", "match": "page=3", "times": 2},
            {"kind": "hang", "match": "page=5", "times": 1},
        ],
        hang_seconds=20,
    )
    settings = settings_for(server, data_dir, per_page=20, rest={"timeout": 0.5})
    summary = run(settings, ["octo/big"], "r1")
    assert summary.complete and summary.failed_pages == 0
    assert numbers(data_dir, "octo/big") == list(range(1, 201))
    errors = sql(
        data_dir,
        "SELECT status, error FROM api_requests_all WHERE error IS NOT NULL ORDER BY status",
    )
    assert [s for s, _ in errors].count(502) == 2
    assert any(s is None and "Timeout" in e for s, e in errors)


def test_a_page_failing_all_retries_is_a_row_and_keeps_the_watermark(
    github: Server, data_dir: Path
) -> None:
    server = github(
        repos={"octo/big": 100}, faults=[{"kind": "502", "match": "page=4", "times": 99}]
    )
    settings = settings_for(server, data_dir, per_page=10, rest={"max_attempts": 3})
    summary = run(settings, ["octo/big"], "r1")
    assert not summary.complete and summary.failed_pages == 1
    assert len(numbers(data_dir, "octo/big")) == 90
    assert sql(data_dir, "SELECT complete, watermark FROM github_syncs_all") == [(False, None)]


@pytest.mark.parametrize("retry_after", [0.05, None])
def test_secondary_limit_backs_off_and_completes(
    github: Server, data_dir: Path, retry_after: float | None
) -> None:
    server = github(
        repos={"octo/big": 300},
        max_in_flight=3,
        secondary_retry_after=retry_after,
        latency_base_ms=20,
    )
    settings = settings_for(server, data_dir, per_page=10, concurrency=12, limit_retries=10)
    summary = run(settings, ["octo/big"], "r1")
    assert summary.complete and summary.failed_pages == 0
    assert server.stats()["secondary"] > 0
    assert numbers(data_dir, "octo/big") == list(range(1, 301))


def test_bad_token_is_a_clear_terminal_error(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/big": 10})
    wrong = "ghp_" + "WrongTokenValue0123456789abcdefABCDEF"
    with pytest.raises(AuthError) as info:
        fetch(settings_for(server, data_dir), ["octo/big"], run_id="r1", token=wrong)
    message = str(info.value)
    assert "401" in message and "token" in message and wrong not in message


def test_unknown_repository_is_a_clear_error_and_others_complete(
    github: Server, data_dir: Path
) -> None:
    server = github(repos={"octo/big": 30})
    summary = run(settings_for(server, data_dir), ["octo/big", "octo/missing"], "r1")
    assert summary.errors and summary.errors[0][0] == "octo/missing"
    assert "not found, or not visible to this token" in summary.errors[0][1]
    assert numbers(data_dir, "octo/big") == list(range(1, 31))


def test_unauthenticated_runs_within_sixty_per_hour(github: Server, data_dir: Path) -> None:
    server = github(repos={"octo/small": 45}, token=None)
    summary = fetch(settings_for(server, data_dir), ["octo/small"], run_id="r1", token=None)
    storage.commit_run(data_dir, "r1")
    assert summary.complete and numbers(data_dir, "octo/small") == list(range(1, 46))
    assert server.stats()["remaining"]["anonymous"] >= 6  # a tenth of 60 kept in reserve


def test_the_token_never_reaches_logs_or_outputs(
    github: Server, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = github(
        repos={"octo/big": 60},
        faults=[{"kind": "502", "match": "page=2", "times": 1}],
        max_in_flight=2,
    )
    caplog.set_level(logging.DEBUG)
    settings = settings_for(server, data_dir, per_page=10)
    run(settings, ["octo/big", "octo/missing"], "r1")
    with pytest.raises(AuthError):
        fetch(settings, ["octo/big"], run_id="r2", token=TOKEN[:-1] + "X")
    assert caplog.records  # httpx and the retries logged
    for record in caplog.records:
        text = record.getMessage() + str(record.args) + str(record.exc_info or "")
        assert TOKEN not in text and TOKEN[:-1] not in text
    for path in data_dir.rglob("*"):
        if path.is_file():
            assert TOKEN[:-1].encode() not in path.read_bytes(), path


def test_dev_server_speaks_github(github: Server) -> None:
    """Link headers in GitHub's format on /repositories/{id}, per_page capped at 100,
    rate-limit headers, weak ETags and free 304s."""
    import httpx

    server = github(repos={"octo/big": 250})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.url, headers=auth, trust_env=False) as client:
        first = client.get("/repos/octo/big/pulls?state=all&per_page=250&page=2")
        assert first.status_code == 200 and len(first.json()) == 100
        base = f"{server.url}/repositories/1000/pulls?state=all&per_page=250"
        assert first.headers["link"] == (
            f'<{base}&page=1>; rel="prev", <{base}&page=3>; rel="next", '
            f'<{base}&page=3>; rel="last", <{base}&page=1>; rel="first"'
        )
        assert first.headers["etag"].startswith('W/"')
        assert first.headers["x-ratelimit-resource"] == "core"
        remaining = int(first.headers["x-ratelimit-remaining"])
        again = client.get(str(first.url), headers={"If-None-Match": first.headers["etag"]})
        assert again.status_code == 304 and int(again.headers["x-ratelimit-remaining"]) == remaining
        by_id = client.get(f"{base}&page=3")
        assert len(by_id.json()) == 50 and "next" not in by_id.links


def test_pull_requests_get_the_typed_rest_of_the_record(github: Server, data_dir: Path) -> None:
    """``pull_requests`` keeps its columns and gains the typed, flattened columns of the
    rest of each pull request, evolving as a REST resource table's do."""
    server = github(repos={"octo/demo": 12})
    settings = settings_for(server, data_dir)
    assert run(settings, ["octo/demo"], "r1").complete
    _, described = storage.query(data_dir, "DESCRIBE pull_requests")
    kinds = {name: kind for name, kind, *_ in described}
    fixed = list(storage.SCHEMAS["pull_requests"].names)
    assert list(kinds)[: len(fixed)] == fixed  # today's columns first, as they were
    assert kinds["labels"] == "VARCHAR[]" and kinds["user_login"] == "VARCHAR"
    assert kinds["locked"] == "BOOLEAN" and kinds["node_id"] == "VARCHAR"
    assert kinds["user__id"] == "BIGINT" and kinds["head__sha"] == "VARCHAR"
    # what a fixed column holds is not repeated
    assert not {"user__login", "head__ref", "base__ref"} & set(kinds)
    _, rows = storage.query(
        data_dir,
        "SELECT number, user_login, user__id, head__sha FROM pull_requests WHERE number = 5",
    )
    assert rows[0][:3] == (5, "dev5", 6) and len(rows[0][3]) == 40

    # a field that is new, and one whose value changes type
    server.touch(
        "octo/demo", [3], fields={"auto_merge": {"merge_method": "squash"}, "locked": "maybe"}
    )
    second = run(settings, ["octo/demo"], "r2")
    assert second.complete
    _, described = storage.query(data_dir, "DESCRIBE pull_requests")
    kinds = {name: kind for name, kind, *_ in described}
    assert kinds["auto_merge__merge_method"] == "VARCHAR" and kinds["locked"] == "BOOLEAN"
    # the run's summary says what its commit records in schema_history
    said = {(c["table"], c["column"], c["change"]) for c in second.schema_changes}
    assert {
        ("pull_requests", "auto_merge__merge_method", "added"),
        ("pull_requests", "locked__v_text", "variant"),
    } <= said
    summary_md = markdown(second, "github-pulls")
    assert "pull_requests.auto_merge__merge_method" in summary_md
    _, rows = storage.query(
        data_dir,
        "SELECT number, locked, locked__v_text, auto_merge__merge_method FROM pull_requests "
        "WHERE number IN (3, 4) ORDER BY 1",
    )
    assert rows == [(3, None, "maybe", "squash"), (4, False, None, None)]
    _, history = storage.query(
        data_dir,
        "SELECT column_name, change FROM schema_history WHERE table_name = 'pull_requests' "
        "AND run_id = 'r2' ORDER BY 1",
    )
    assert history == [("auto_merge__merge_method", "added"), ("locked__v_text", "variant")]
    assert numbers(data_dir, "octo/demo").count(3) == 2  # the log keeps both versions


def listed(server: DevGitHub, repos: list[str], field: str, *names: str) -> set[tuple[Any, ...]]:
    """(repo, number, position, *names) of every element of each pull request's ``field``
    list, as the API lists them now."""
    import httpx

    auth = {"Authorization": f"Bearer {TOKEN}"}
    out = set()
    with httpx.Client(base_url=server.url, headers=auth, trust_env=False) as client:
        for repo in repos:
            for pr in client.get(f"/repos/{repo}/pulls?state=all&per_page=100").json():
                for i, element in enumerate(pr[field]):
                    out.add((repo, pr["number"], i, *(element[n] for n in names)))
    return out


def stored(data_dir: Path, table: str, *names: str) -> set[tuple[Any, ...]]:
    """(repo, number, position, *names) of a child table's rows, through its parent."""
    columns = ", ".join(f"c.{n}" for n in names)
    _, rows = storage.query(
        data_dir,
        f"SELECT p.repo, p.number, c._index, {columns} FROM {table} c "
        "JOIN pull_requests p ON c.parent_key = p.key AND c._root_key = p.key",
    )
    return set(rows)


def test_pull_requests_nested_lists_are_child_tables_replaced_per_pull_request(
    github: Server, data_dir: Path
) -> None:
    """``labels``, ``assignees``, ``requested_reviewers`` become child tables linked to
    their pull request's key, with positions; a pull request fetched again replaces its
    child rows by its current lists, and the others' rows stay."""
    from typer.testing import CliRunner

    from cli.main import app

    repos = ["octo/demo", "octo/docs"]
    server = github(repos={"octo/demo": 12, "octo/docs": 5})
    settings = settings_for(server, data_dir)
    assert run(settings, repos, "r1").complete
    labels = stored(data_dir, "pull_requests__labels", "id", "name")
    assert labels == listed(server, repos, "labels", "id", "name") and labels
    assignees = stored(data_dir, "pull_requests__assignees", "login", "id")
    assert assignees == listed(server, repos, "assignees", "login", "id")
    assert {i for *_, i, _, _ in assignees} == {0, 1}  # two a pull request, in order
    _, described = storage.query(data_dir, "DESCRIBE pull_requests__labels")
    kinds = {name: kind for name, kind, *_ in described}
    assert kinds["id"] == "BIGINT" and kinds["name"] == "VARCHAR" and kinds["_index"] == "BIGINT"
    _, keys = storage.query(data_dir, "SELECT key FROM pull_requests WHERE number = 4")
    assert sorted(k for (k,) in keys) == ["octo/demo#4", "octo/docs#4"]
    docs_before = {r for r in labels if r[0] == "octo/docs"}

    # 3 gets two other labels, 5 loses its label, 4 gets a reviewer; octo/docs is untouched
    two = [{"id": 7, "name": "bug", "color": "d73a4a"}, {"id": 8, "name": "docs"}]
    server.touch("octo/demo", [3], fields={"labels": two})
    server.touch("octo/demo", [5], fields={"labels": []})
    server.touch("octo/demo", [4], fields={"requested_reviewers": [{"login": "rev", "id": 99}]})
    assert run(settings, repos, "r2").complete
    labels = stored(data_dir, "pull_requests__labels", "id", "name")
    assert labels == listed(server, repos, "labels", "id", "name")
    assert {r for r in labels if r[:2] == ("octo/demo", 3)} == {
        ("octo/demo", 3, 0, 7, "bug"),
        ("octo/demo", 3, 1, 8, "docs"),
    }
    assert not {r for r in labels if r[:2] == ("octo/demo", 5)}  # no stale row
    assert {r for r in labels if r[0] == "octo/docs"} == docs_before
    _, runs = storage.query(
        data_dir,
        "SELECT DISTINCT run_id FROM pull_requests__labels WHERE starts_with(key, 'octo/docs#')",
    )
    assert runs == [("r1",)]  # not fetched again, not rewritten
    _, colors = storage.query(
        data_dir, "SELECT color FROM pull_requests__labels WHERE key = 'octo/demo#3/labels/0'"
    )
    assert colors == [("d73a4a",)]  # a new field of a label: a new column
    assert stored(data_dir, "pull_requests__requested_reviewers", "login") == {
        ("octo/demo", 4, 0, "rev")
    }

    # the warehouse's views and the schema history list the child tables
    assert storage.refresh_warehouse(data_dir)
    with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
        views = {v for (v,) in con.execute("SELECT view_name FROM duckdb_views()").fetchall()}
        count = con.execute("SELECT count(*) FROM pull_requests__assignees").fetchone()
    assert {"pull_requests__labels", "pull_requests__assignees"} <= views
    assert count == (len(assignees),)
    for args in (["github"], ["github", "pull_requests"]):
        result = CliRunner().invoke(
            app, ["schema", *args, "--data-dir", str(data_dir), "-f", "json"]
        )
        assert result.exit_code == 0, result.output
        got = {(r["table_name"], r["column_name"], r["run_id"]) for r in json.loads(result.output)}
        assert ("pull_requests__labels", "name", "r1") in got
        assert ("pull_requests__labels", "color", "r2") in got
        assert ("pull_requests__requested_reviewers", "login", "r2") in got
        assert ("pull_requests", "key", "r1") in got


@pytest.mark.parametrize(
    ("base_ms", "item_ms", "small"),
    [(20.0, 40.0, True), (800.0, 0.0, False)],
    ids=["per-item-dominates", "fixed-part-dominates"],
)
def test_the_page_plan_follows_the_hosts_latency_curve(
    github: Server, data_dir: Path, base_ms: float, item_ms: float, small: bool
) -> None:
    """The page size and in-flight count the run's summary records, planned from the
    probes' latency and the client's CPU a request: where each item costs (40 ms an item,
    20 ms a page) the 300 pull requests go out as small pages, many at once (~60 pages of
    5 at 3 ms of CPU a request, ~30 of 10 at 10 ms); where the page costs (800 ms, items
    free) as a few large pages, about as soon and with far fewer requests."""
    server = github(repos={"octo/big": 300}, latency_base_ms=base_ms, latency_per_item_ms=item_ms)
    summary = run(settings_for(server, data_dir), ["octo/big"], "r1")
    assert summary.complete and numbers(data_dir, "octo/big") == list(range(1, 301))
    plan = summary.size_plan_figures
    assert plan is not None and summary.per_page == plan["per_page"]
    assert plan["requests"] == -(-300 // plan["per_page"])
    assert plan["host_in_flight"] == 100 and plan["host_per_minute"] == 900
    assert "in flight" in (summary.size_plan or "")
    assert plan["request_cpu_seconds"] > 0  # measured over the probes
    if small:
        assert plan["per_page"] <= 10 and plan["in_flight"] >= 30
        # the fit saw the time per item (40 ms; under load the probes' noise fits less of it)
        assert plan["item_seconds"] > 0.01
    else:
        assert plan["per_page"] >= 15 and plan["in_flight"] <= 20
    # the window never let more than the plan in flight (3 probes before it)
    assert server.stats()["max_in_flight"] <= max(plan["in_flight"], 3)
