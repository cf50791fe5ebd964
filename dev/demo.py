"""``ingest demo``: the main job end to end on embedded defaults.

Starts the stock ``moto_server`` on a free loopback port, seeds a bucket with
generated sample documents, runs the ``s3-ingest`` flow twice (the second
run shows the incremental path: nothing changed, no GET), prints the summary
and a sample query, and stops the server. Then the ``github-pulls`` flow
(``dev.github_demo``) and the ``rest-ingest`` flow over the two example
source files of ``sources/`` (``dev.rest_demo``), each on a local server.
"""

from __future__ import annotations

import os
from pathlib import Path

import boto3
import typer

from dev import samples
from dev.github_demo import run_github_demo
from dev.rest_demo import run_rest_demo
from dev.servers.s3 import DevServer
from ingest import console, search, storage

BUCKET = "demo-documents"
PREFIX = "incoming/"


def seed(endpoint_url: str) -> int:
    client = boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    docs = samples.documents()
    for key, body in docs.items():
        client.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=body)
    return len(docs)


def run(data_dir: Path) -> int:
    """Run the demo; returns the exit code."""
    from flows.s3_ingest import s3_ingest

    # moto accepts any credentials; these never reach AWS.
    os.environ.update(
        AWS_ACCESS_KEY_ID="demo", AWS_SECRET_ACCESS_KEY="demo", AWS_DEFAULT_REGION="us-east-1"
    )
    with DevServer(stock=True) as server:
        n = seed(server.url)
        typer.echo(f"moto_server on {server.url}: seeded s3://{BUCKET}/{PREFIX} with {n} documents")
        for label in ("first run", "second run (nothing changed)"):
            typer.echo(f"\n== s3-ingest, {label}")
            summary = s3_ingest(
                bucket=BUCKET, prefix=PREFIX, endpoint_url=server.url, data_dir=str(data_dir)
            )
            typer.echo(console.run_summary(summary))
    run_github_demo(data_dir)
    run_rest_demo(data_dir)
    sql = "SELECT key, status, size, error FROM s3_objects ORDER BY key"
    typer.echo(f'\n== ingest query --data-dir {data_dir} "{sql}"')
    typer.echo(console.table(*storage.query(data_dir, sql)))
    sql = "SELECT key, kind, status, chars, text FROM documents ORDER BY key"
    typer.echo(f'\n== ingest query --data-dir {data_dir} "{sql}"')
    typer.echo(console.table(*storage.query(data_dir, sql)))
    for words in ("도면", "floor plan"):
        typer.echo(f'\n== ingest search --data-dir {data_dir} "{words}"')
        hits = search.search(data_dir, words, limit=5)
        rows = [(h.key, h.kind, h.score, h.snippet) for h in hits]
        typer.echo(console.table(["key", "kind", "score", "snippet"], rows))
    typer.echo(f"\nOpen the same tables with: duckdb {data_dir / 'warehouse.duckdb'}")
    return 0
