"""Every SQL query of the README and docs/ runs against a data folder made by real runs (a
plain ``s3-ingest`` run, a ``nightly`` run over the same bucket with nothing changed,
``github-pulls`` and ``rest-ingest``), and ``ingest status`` shows each source after
plain runs, not only after nightly ones."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from cli.main import app
from dev.servers.github import DevGitHub
from dev.servers.rest import DevRest
from flows.github_pulls import github_pulls
from flows.nightly import nightly
from flows.rest_ingest import rest_ingest
from flows.s3_ingest import s3_ingest
from ingest import storage
from ingest.report import status
from tests.helpers import ROOT, put_many, rows

pytestmark = pytest.mark.flow

# docs/documents.md asks about drawings, pages and chunks this folder has none of: its
# queries run over a lake of the shared fixture documents
# (tests/ingest/extract/test_extract_structure.py).
OWN_TEST = {"documents.md"}
PAGES = [
    ROOT / "README.md",
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name not in OWN_TEST),
]
TOKEN = "ghp_" + "DocsQueryTokenValue0123456789abcdefAB"  # fake
KEY = "docs-query-api-key-0123"  # fake


def documented_queries() -> list[tuple[str, str]]:
    """(where, sql) of every query on the pages: ``sql`` blocks (statement by statement;
    a CREATE VIEW by its query), ``ingest query "..."`` commands and inline SELECTs."""
    found: list[tuple[str, str]] = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        name = page.relative_to(ROOT).as_posix()
        for block in re.findall(r"```sql\n(.*?)```", text, re.S):
            lines = [ln for ln in block.splitlines() if not ln.lstrip().startswith("--")]
            for statement in "\n".join(lines).split(";"):
                sql = re.sub(r"(?is)^\s*CREATE\s+VIEW\s+\w+\s+AS\s", "", statement).strip()
                if sql:
                    found.append((name, sql))
        found += [(name, q) for q in re.findall(r'ingest query "(.*?)"', text, re.S)]
        found += [(name, q) for q in re.findall(r"`((?:SELECT|WITH) [^`]*)`", text)]
    # "SELECT ..." stands for any query in the option's example
    return [(n, " ".join(q.split())) for n, q in found if "..." not in q]


QUERIES = documented_queries()


@pytest.fixture(scope="module")
def lake(
    prefect_harness: None, s3_server: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """Runs as a user makes them, into one data folder."""
    data = tmp_path_factory.mktemp("documented") / "data"
    client = boto3.client("s3", endpoint_url=s3_server.url, region_name="us-east-1")
    bucket = "documented-queries"
    client.create_bucket(Bucket=bucket)
    put_many(client, bucket, {f"in/note-{i}.txt": f"site note {i}".encode() for i in range(6)})
    mp = pytest.MonkeyPatch()
    mp.setenv("GITHUB_TOKEN", TOKEN)
    mp.setenv("TICKETS_API_KEY", KEY)
    try:
        # keep_files=False: each batch is one fetch-batch task, as on a cluster
        first = s3_ingest(
            bucket=bucket, prefix="in/", endpoint_url=s3_server.url, data_dir=str(data),
            keep_files=False,
        )  # fmt: skip
        night = nightly(
            bucket=bucket, prefix="in/", repos=[], endpoint_url=s3_server.url,
            data_dir=str(data), return_state=True,
        )  # fmt: skip
        assert night.is_completed(), night
        with DevGitHub(repos={"octo/engine": 30, "octo/docs": 5}, token=TOKEN) as gh:
            pulls = github_pulls(
                repos=["octo/engine", "octo/docs"], base_url=gh.url, data_dir=str(data)
            )
        with DevRest(api_key=KEY, paginator="cursor", projects=2, tickets_per_project=7) as api:
            tickets = rest_ingest(
                source="sources/tickets.yaml", base_url=api.url, data_dir=str(data)
            )
        yield {
            "data": data,
            "bucket": bucket,
            "first": first,
            "nightly": str(night.state_details.flow_run_id),
            "pulls": pulls,
            "tickets": tickets,
        }
    finally:
        mp.undo()


def test_the_pages_hold_the_queries_that_matter() -> None:
    text = " ".join(q for _, q in QUERIES)
    assert len(QUERIES) >= 12
    assert "FROM flow_runs" in text and "parent_flow_run_id" in text
    assert "ORDER BY ingested_at DESC LIMIT 1" not in text  # the query that picked old runs


@pytest.mark.parametrize(("page", "sql"), QUERIES, ids=[f"{p}:{q[:50]}" for p, q in QUERIES])
def test_every_documented_query_runs(lake: dict[str, Any], page: str, sql: str) -> None:
    columns, values = storage.query(lake["data"], sql)
    assert columns
    if "status = 'failed'" not in sql:  # these runs fail no object
        assert values, (page, sql)


def test_why_was_last_night_slow_names_last_nights_runs(lake: dict[str, Any]) -> None:
    """The nightly run changed nothing, so it wrote no s3_objects row: the newest
    ``ingested_at`` names the plain run before it, whose downloads the old query showed."""
    data = lake["data"]
    [child] = rows(
        data,
        f"SELECT flow_run_id FROM flow_runs WHERE parent_flow_run_id = '{lake['nightly']}'",
    )
    newest_row_run = rows(data, "SELECT run_id FROM s3_objects ORDER BY ingested_at DESC LIMIT 1")
    assert newest_row_run == [{"run_id": lake["first"].run_id}]  # not last night's run
    tonight = {
        r["task_name"]
        for r in rows(
            data, f"SELECT task_name FROM task_timings WHERE flow_run_id = '{child['flow_run_id']}'"
        )
    }
    assert "fetch-batch" not in tonight  # nothing to download last night
    slow = [q for _, q in QUERIES if "parent_flow_run_id = (SELECT flow_run_id" in q]
    latest_s3 = [q for _, q in QUERIES if "flow_name = 's3-ingest'" in q]
    assert slow and latest_s3
    for sql in slow + latest_s3:
        columns, values = storage.query(data, sql)
        got = {dict(zip(columns, v, strict=True))["task_name"] for v in values}
        assert got == tonight, sql
        if "flow_name" in columns:
            assert {dict(zip(columns, v, strict=True))["flow_name"] for v in values} == {
                "s3-ingest"
            }


def test_status_shows_every_source_after_plain_runs(lake: dict[str, Any]) -> None:
    fresh = {(r["source"], r["target"]): r for r in status.freshness_now(lake["data"])}
    assert set(fresh) == {
        ("s3-ingest", f"s3://{lake['bucket']}/in/"),
        ("github-pulls", "octo/engine, octo/docs"),
        ("rest-ingest", "tickets"),
    }
    assert {r["state"] for r in fresh.values()} == {"completed"}
    assert fresh[("github-pulls", "octo/engine, octo/docs")]["rows_changed"] == 35
    assert fresh[("rest-ingest", "tickets")]["rows_changed"] == lake["tickets"].records == 2 + 14
    # the nightly run replaced the s3 row: it changed nothing, the plain run before it 6
    assert fresh[("s3-ingest", f"s3://{lake['bucket']}/in/")]["rows_changed"] == 0
    out = CliRunner().invoke(app, ["status", "--data-dir", str(lake["data"])]).output
    assert "rest-ingest" in out and "github-pulls" in out and "never" not in out
    nights = out.split("Last 7 nights", 1)[1]
    assert "s3-ingest completed" in nights and "no nightly run yet" not in nights


def test_status_says_why_a_new_lake_is_empty(tmp_path: Path) -> None:
    out = CliRunner().invoke(app, ["status", "--data-dir", str(tmp_path / "new")]).output
    assert "no run has finished" in out and "no nightly run yet" in out
