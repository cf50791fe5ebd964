"""The ``github-pulls`` flow in real Prefect flow runs (the session's test
harness) against the GitHub-compatible server on loopback; and the
``ingest github`` command."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from dev.servers.github import DevGitHub
from flows.github_pulls import github_pulls
from ingest import storage
from ingest.rest.errors import AuthError, RestTerminalError
from ingest.rest.summary import github_headline

pytestmark = pytest.mark.flow

TOKEN = "ghp_" + "FlowTokenValue0123456789abcdefABCDEFG"  # fake, built so no scanner flags it
REPOS = {"octo/engine": 230, "octo/docs": 40}


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record) + str(record.args) + str(record.exc_info or ""))


@pytest.fixture(scope="module")
def server() -> Iterator[DevGitHub]:
    with DevGitHub(repos=REPOS, token=TOKEN) as srv:
        yield srv


@pytest.fixture
def logs() -> Iterator[Collect]:
    handler = Collect()
    loggers = [logging.getLogger(n) for n in ("", "prefect", "ingest", "httpx", "httpcore")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.addHandler(handler)
    logging.getLogger("httpx").setLevel(logging.DEBUG)
    yield handler
    for lg, level in zip(loggers, levels, strict=True):
        lg.removeHandler(handler)
        lg.setLevel(level)


def test_flow_stores_everything_then_reruns_for_free(
    prefect_harness: None,
    server: DevGitHub,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    logs: Collect,
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    first = github_pulls(
        repos=list(REPOS), base_url=server.url, data_dir=str(data_dir), concurrency=8
    )
    assert first.complete and first.pulls == 270 and not first.errors
    rows = storage.query(
        data_dir,
        "SELECT repo, count(*), count(DISTINCT number) FROM pull_requests "
        "GROUP BY repo ORDER BY repo",
    )[1]
    assert rows == [("octo/docs", 40, 40), ("octo/engine", 230, 230)]
    stages = {s["stage"] for s in first.stages}
    assert {"load-sync-state", "fetch-pulls"} <= stages

    before = server.stats()["counted"]
    second = github_pulls(
        repos=list(REPOS), base_url=server.url, data_dir=str(data_dir), concurrency=8
    )
    assert second.complete and second.budget_spent == 0 and second.not_modified == 2
    # The per-repository rows add up to the totals the summary gives.
    assert sum(r["not_modified"] for r in second.repos) == second.not_modified
    for_repos = sum(r["requests"] for r in second.repos)
    assert f"{second.requests} requests ({for_repos} for the repositories" in (
        github_headline(second)
    )
    unattributed = storage.query(
        data_dir,
        f"SELECT count(*) FROM api_requests WHERE run_id = '{second.run_id}' AND repo = ''",
    )[1][0][0]
    assert for_repos + unattributed == second.requests
    assert server.stats()["counted"] == before
    per_run = storage.query(
        data_dir,
        "SELECT run_id, count(*) FILTER (WHERE NOT from_cache) FROM api_requests "
        "WHERE repo <> '' GROUP BY run_id ORDER BY min(requested_at)",
    )[1]
    assert [n for _, n in per_run] == [first.budget_spent, 0]
    assert logs.lines and not [line for line in logs.lines if TOKEN in line]


def test_flow_reads_the_token_from_a_secret_block(
    prefect_harness: None, server: DevGitHub, data_dir: Path, logs: Collect
) -> None:
    from prefect.blocks.system import Secret

    Secret(value=TOKEN).save("github-token-test", overwrite=True)
    summary = github_pulls(
        repos=["octo/docs"],
        base_url=server.url,
        data_dir=str(data_dir),
        token_block="github-token-test",
    )
    assert summary.complete and summary.pulls == 40
    assert not [line for line in logs.lines if TOKEN in line]


def test_flow_fails_clearly_for_a_missing_repository_after_storing_the_others(
    prefect_harness: None, server: DevGitHub, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    with pytest.raises(RestTerminalError, match="octo/nope not found, or not visible"):
        github_pulls(repos=["octo/docs", "octo/nope"], base_url=server.url, data_dir=str(data_dir))
    assert storage.query(data_dir, "SELECT count(*) FROM pull_requests")[1] == [(40,)]


def test_flow_fails_at_once_for_a_rejected_token(
    prefect_harness: None,
    server: DevGitHub,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    logs: Collect,
) -> None:
    wrong = "ghp_" + "RejectedTokenValue0123456789abcdefAB"
    monkeypatch.setenv("GITHUB_TOKEN", wrong)
    with pytest.raises(AuthError, match="401"):
        github_pulls(repos=["octo/docs"], base_url=server.url, data_dir=str(data_dir))
    assert logs.lines and not [line for line in logs.lines if wrong in line]


def test_cli_github_command(
    prefect_harness: None, server: DevGitHub, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    args = ["github", "--repo", "octo/engine", "--repo", "octo/docs", "--base-url", server.url]
    args += ["--per-page", "25", "--concurrency", "4", "--data-dir", str(data_dir)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "270 pull requests from 2 repositories" in result.output
    assert "per_page 25" in result.output and TOKEN not in result.output
    # Printed once the run has ended: its duration is Prefect's start to end of the run,
    # the figure its flow_runs row holds (and the UI shows)
    [row] = storage.query(data_dir, "SELECT flow_run_id, seconds FROM flow_runs")[1]
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        run = client.read_flow_run(row[0])
    assert row[1] == pytest.approx((run.end_time - run.start_time).total_seconds(), abs=1e-6)
    assert f"{row[1]:.2f} s in Running (its start to end in Prefect)" in result.output
    assert "up to this summary" not in result.output
    result = CliRunner().invoke(
        app, ["github", "--repo", "octo/zzz", "--base-url", server.url, "--data-dir", str(data_dir)]
    )
    assert result.exit_code == 2 and "not found" in result.output
