"""The rest-ingest flow and ``ingest rest``: real Prefect flow runs (session harness)
over the example source files against the local REST and GitHub-compatible servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from prefect.blocks.system import Secret
from typer.testing import CliRunner

from cli.main import app
from dev.servers.github import DevGitHub
from dev.servers.rest import DevRest
from flows.rest_ingest import rest_ingest
from ingest import storage
from ingest.rest.errors import AuthError, RestTerminalError, SourceError
from ingest.rest.summary import headline

pytestmark = pytest.mark.flow

KEY = "flow-api-key-0123456789"  # fake


def table_versions(data_dir: Path) -> dict[str, int]:
    return {
        t: storage.open_table(data_dir, t).version()
        for t in ("tickets__projects", "tickets__tickets")
    }


@pytest.fixture(scope="module")
def api() -> Iterator[DevRest]:
    with DevRest(api_key=KEY, paginator="cursor", projects=3, tickets_per_project=60) as srv:
        yield srv


def test_tickets_example_runs_then_reruns_incrementally(
    prefect_harness: None, api: DevRest, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_API_KEY", KEY)
    first = rest_ingest(source="sources/tickets.yaml", base_url=api.url, data_dir=str(data_dir))
    assert first.complete and first.records == 3 + 180
    # A rerun with nothing changed: the inclusive since hands back each listing's newest
    # ticket, and the projects listing is read whole; all are as stored, so none is
    # counted as fetched and no row is written.
    versions = table_versions(data_dir)
    again = rest_ingest(source="sources/tickets.yaml", base_url=api.url, data_dir=str(data_dir))
    assert {r["resource"]: (r["records"], r["unchanged"]) for r in again.resources} == {
        "projects": (0, 3),
        "tickets": (0, 3),
    }
    assert again.records == 0 and "(6 unchanged not counted)" in headline(again)
    assert table_versions(data_dir) == versions
    api.touch(3, [1])
    second = rest_ingest(source="sources/tickets.yaml", base_url=api.url, data_dir=str(data_dir))
    got = {r["resource"]: r["records"] for r in second.resources}
    assert got == {"projects": 0, "tickets": 1}  # the changed one; each newest is unchanged
    assert {r["resource"]: r["unchanged"] for r in second.resources}["tickets"] == 3
    _, rows = storage.query(data_dir, "SELECT count(*), count(DISTINCT key) FROM tickets__tickets")
    assert rows == [(180, 180)]
    _, rows = storage.query(
        data_dir, "SELECT count(*) FROM api_requests WHERE repo = 'tickets/tickets'"
    )
    assert rows[0][0] > 0  # timing rows like every source's
    _, stages = storage.query(
        data_dir, "SELECT DISTINCT task_name FROM task_timings WHERE task_name LIKE 'fetch-rest%'"
    )
    assert stages == [("fetch-rest-source",)]
    # each run's flow_runs row, as the s3 and github flows write theirs
    _, runs = storage.query(
        data_dir, "SELECT flow_name, items, state FROM flow_runs ORDER BY started_at"
    )
    # The first run, the rerun with nothing changed, the run after one ticket changed.
    assert runs == [
        ("rest-ingest", 183, "completed"),
        ("rest-ingest", 0, "completed"),
        ("rest-ingest", 1, "completed"),
    ]


def test_credential_from_a_secret_block(
    prefect_harness: None, api: DevRest, data_dir: Path, tmp_path: Path
) -> None:
    Secret(value=KEY).save("tickets-key-test", overwrite=True)
    text = Path("sources/tickets.yaml").read_text()
    text = text.replace("env: TICKETS_API_KEY", "secret: tickets-key-test")
    source = tmp_path / "tickets.yaml"
    source.write_text(text)
    summary = rest_ingest(source=str(source), base_url=api.url, data_dir=str(data_dir))
    assert summary.complete and summary.records == 183


def test_bad_source_file_and_bad_key_fail_clearly(
    prefect_harness: None,
    api: DevRest,
    data_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nclient:\n  base_url: http://x/\n  concurency: 3\nresources: []\n")
    with pytest.raises(SourceError) as info:
        rest_ingest(source=str(bad), data_dir=str(data_dir))
    assert f"{bad}:4: client.concurency: Extra inputs are not permitted" in str(info.value)
    assert f"{bad}:5: resources:" in str(info.value)
    monkeypatch.setenv("TICKETS_API_KEY", "wrong-key-0123456789")
    with pytest.raises(AuthError, match="401") as err:
        rest_ingest(source="sources/tickets.yaml", base_url=api.url, data_dir=str(data_dir))
    assert "wrong-key-0123456789" not in str(err.value)


def test_malformed_page_fails_the_run_after_storing_the_rest(
    prefect_harness: None, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TICKETS_API_KEY", KEY)
    faults = [{"kind": "repeat_cursor", "match": "/projects/2/tickets", "times": 99}]
    server = DevRest(
        api_key=KEY, paginator="cursor", projects=3, tickets_per_project=60, faults=faults
    )
    with server as srv, pytest.raises(RestTerminalError, match="the cursor repeats"):
        rest_ingest(source="sources/tickets.yaml", base_url=srv.url, data_dir=str(data_dir))
    _, rows = storage.query(
        data_dir, "SELECT parent_key, count(*) FROM tickets__tickets GROUP BY 1 ORDER BY 1"
    )
    assert rows == [("1", 60), ("2", 50), ("3", 60)]  # the first page of 2 is kept


# GitHub's pull requests declared the plain way (no dialect): an owner's repositories,
# then each one's pull requests as a child resource, newest first, incremental. The
# project's GitHub source file is sources/github.yaml (the dialect); this one shows the
# plain engine over a Link-header API with a bearer token.
PLAIN_GITHUB = """
name: github
client:
  base_url: https://api.github.com/
  auth: {type: bearer, env: GITHUB_TOKEN}
  headers: {Accept: application/vnd.github+json}
  paginator: {type: header_link, page_size: auto, page_size_param: per_page}
  concurrency: 64
resource_defaults:
  primary_key: id
resources:
  - name: repos
    endpoint:
      path: orgs/octo/repos
  - name: pulls
    primary_key: number
    endpoint:
      path: repos/{resources.repos.owner.login}/{resources.repos.name}/pulls
      params: {state: all, sort: updated, direction: desc}
      incremental: {cursor_path: updated_at, row_order: desc}
"""


def test_cli_rest_command_runs_a_plain_declared_github_source(
    prefect_harness: None, data_dir: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    token = "ghp_" + "RestCliTokenValue0123456789abcdefABC"  # fake
    monkeypatch.setenv("GITHUB_TOKEN", token)
    source = tmp_path / "plain_github.yaml"
    source.write_text(PLAIN_GITHUB)
    with DevGitHub(repos={"octo/engine": 230, "octo/docs": 40}, token=token) as gh:
        args = ["rest", str(source), "--base-url", gh.url]
        result = CliRunner().invoke(app, [*args, "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert "pulls -> github__pulls: 270 records, 2 listings" in result.output
    assert token not in result.output
    _, rows = storage.query(data_dir, "SELECT data FROM github__pulls")
    numbers = sorted(json.loads(d)["number"] for (d,) in rows)
    assert numbers == sorted([*range(1, 231), *range(1, 41)])


def test_the_github_dialect_source_file_runs_what_ingest_github_runs(
    prefect_harness: None, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``client.dialect: github`` (sources/github.yaml): the pull_requests table, stored
    page ETags sent back (an unchanged rerun spends no budget), the github_syncs rows."""
    token = "ghp_" + "DialectTokenValue0123456789abcdefABC"  # fake
    monkeypatch.setenv("GITHUB_TOKEN", token)
    with DevGitHub(repos={"octo/engine": 230, "octo/docs": 40}, token=token) as gh:
        args = ["rest", "sources/github.yaml", "--base-url", gh.url, "--data-dir", str(data_dir)]
        first = CliRunner().invoke(app, args)
        counted = gh.stats()["counted"]
        second = CliRunner().invoke(app, args)
        assert gh.stats()["counted"] == counted  # every answer a 304: no budget spent
    assert first.exit_code == 0, first.output
    assert "270 pull requests from 2 repositories" in first.output
    assert "octo/engine: 230 pull requests" in first.output and token not in first.output
    assert second.exit_code == 0, second.output
    assert "0 pull requests from 2 repositories" in second.output
    assert "budget spent 0" in second.output
    _, rows = storage.query(
        data_dir,
        "SELECT repo, count(*), count(DISTINCT number) FROM pull_requests GROUP BY 1 ORDER BY 1",
    )
    assert rows == [("octo/docs", 40, 40), ("octo/engine", 230, 230)]
    _, syncs = storage.query(
        data_dir, "SELECT repo, bool_and(complete) FROM github_syncs GROUP BY 1 ORDER BY 1"
    )
    assert syncs == [("octo/docs", True), ("octo/engine", True)]


def test_a_github_dialect_source_is_checked_before_it_runs(tmp_path: Path) -> None:
    text = Path("sources/github.yaml").read_text()
    bad = tmp_path / "github.yaml"
    bad.write_text(text.replace("  - octo/docs", "  - not a repo"))
    with pytest.raises(SourceError, match="repository must look like owner/name"):
        rest_ingest.fn(source=str(bad))
    bad.write_text(text.replace("state: all", "state: merged"))
    with pytest.raises(SourceError, match="use open, closed or all"):
        rest_ingest.fn(source=str(bad))
