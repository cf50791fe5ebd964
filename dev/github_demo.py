"""The GitHub part of the demo (``make demo``): the ``github-pulls`` flow against a local
GitHub-compatible server (``dev.servers.github``) on loopback, no account needed.

Three runs show the incremental path: a first full run, a re-run with nothing
changed (every answer a 304, no budget spent), and a run after two pull
requests changed (only the top of the listing is read again).
"""

from __future__ import annotations

from pathlib import Path

import typer

from dev.servers.github import DevGitHub
from ingest import storage
from ingest.report import console
from ingest.rest.summary import headline

DEMO_REPOS = {"octo/engine": 480, "octo/docs": 120, "octo/tools": 60}


def run_github_demo(data_dir: Path) -> None:
    """Run ``github-pulls`` three times against the local server and print the results."""
    from flows.github_pulls import github_pulls

    with DevGitHub(repos=DEMO_REPOS, latency_base_ms=80, latency_per_item_ms=8) as server:
        typer.echo(
            f"\nGitHub-compatible server on {server.url}: "
            + ", ".join(f"{r} ({n} pull requests)" for r, n in DEMO_REPOS.items())
        )
        for label in ("first run", "second run (nothing changed)", "third run (2 updated)"):
            if label.startswith("third"):
                server.touch("octo/engine", [7, 300])
            typer.echo(f"\n== github-pulls, {label}")
            summary = github_pulls(
                repos=list(DEMO_REPOS), base_url=server.url, data_dir=str(data_dir)
            )
            typer.echo(headline(summary))
    sql = (
        "SELECT repo, count(*) AS pull_requests, max(updated_at) AS newest FROM pull_requests "
        "GROUP BY repo ORDER BY repo"
    )
    typer.echo(f'\n== ingest query --data-dir {data_dir} "{sql}"')
    typer.echo(console.table(*storage.query(data_dir, sql)))
