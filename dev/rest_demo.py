"""The declared-REST part of the demo (``make demo``): the ``rest-ingest`` flow runs the two
example source files of ``sources/`` against local servers, no account needed.

* ``sources/tickets.yaml``: the generic REST server (``dev.servers.rest``) with a
  cursor in the body, an API key, and a hidden ceiling of 8 requests in flight
  that the client has to find; a first run, then a run after three tickets
  changed (only they come back, through ``since``).
* ``sources/github.yaml``: the GitHub-compatible server (``dev.servers.github``):
  the pull requests of three repositories through the GitHub dialect (page ETags
  sent back, the watermark), into ``pull_requests``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from dev.servers.github import DevGitHub
from dev.servers.rest import DevRest
from ingest import storage
from ingest.report import console
from ingest.rest.summary import headline

DEMO_KEY = "demo-api-key-not-a-secret"
DEMO_TOKEN = "demo-token-not-a-secret"
# The ticket API of the demo (and of dev/serve_demo.py, which points the rest-ingest
# deployment at it through dev/prefect.demo.yaml): 12 projects of 200 tickets, a cursor
# in the body, an API key, and a ceiling of 8 in flight that nothing announces.
TICKETS = {
    "api_key": DEMO_KEY,
    "paginator": "cursor",
    "projects": 12,
    "tickets_per_project": 200,
    "max_in_flight": 8,
    "limit_retry_after": 0.5,
    "latency_ms": 40,
    "latency_per_item_ms": 1,
}


def tickets_server(port: int | None = None) -> DevRest:
    """The demo's ticket API (``TICKETS``), on ``port`` or a free one."""
    return DevRest(port=port, **TICKETS)


@contextmanager
def _env(**values: str) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_rest_demo(data_dir: Path) -> None:
    from flows.rest_ingest import rest_ingest

    with (
        _env(TICKETS_API_KEY=DEMO_KEY),
        tickets_server() as api,
    ):
        typer.echo(
            f"\nTicket API on {api.url}: 12 projects of 200 tickets, a cursor in the body, "
            "an API key, at most 8 requests in flight (not announced; 12 listings want more)"
        )
        for label in ("first run", "second run (3 tickets changed)"):
            if label.startswith("second"):
                api.touch(2, [10, 11], add=1)
            typer.echo(f"\n== ingest rest sources/tickets.yaml, {label}")
            summary = rest_ingest(
                source="sources/tickets.yaml", base_url=api.url, data_dir=str(data_dir)
            )
            typer.echo(headline(summary))
    repos = {"octo/engine": 480, "octo/docs": 120, "octo/tools": 60}
    with (
        _env(GITHUB_TOKEN=DEMO_TOKEN),
        DevGitHub(repos=repos, latency_base_ms=80, latency_per_item_ms=8) as gh,
    ):
        typer.echo(f"\nGitHub-compatible server on {gh.url}, as a declared source")
        for label in ("first run", "second run (2 updated)"):
            if label.startswith("second"):
                gh.touch("octo/engine", [7, 300])
            typer.echo(f"\n== ingest rest sources/github.yaml, {label}")
            summary = rest_ingest(
                source="sources/github.yaml", base_url=gh.url, data_dir=str(data_dir)
            )
            typer.echo(headline(summary))
    sql = (
        "SELECT resource, count(*) AS records, count(DISTINCT parent_key) AS parents, "
        "max(cursor) AS newest FROM tickets__tickets GROUP BY ALL UNION ALL "
        "SELECT resource, count(*), count(DISTINCT parent_key), max(cursor) "
        "FROM (SELECT 'pulls' AS resource, repo AS parent_key, "
        "CAST(updated_at AS VARCHAR) AS cursor FROM pull_requests) GROUP BY ALL"
    )
    typer.echo(f'\n== ingest query --data-dir {data_dir} "{sql}"')
    typer.echo(console.table(*storage.query(data_dir, sql)))
    sql = "SELECT host, window_size, ceiling, limit_answers, requests FROM api_windows"
    typer.echo(f'\n== ingest query --data-dir {data_dir} "{sql}"')
    typer.echo(console.table(*storage.query(data_dir, sql)))
