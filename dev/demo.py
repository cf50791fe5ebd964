"""The demo (``make demo``, or ``python -m dev.demo [--data-dir DIR]`` from a checkout):
the main job end to end on embedded defaults.

Starts the stock ``moto_server`` on a free loopback port, seeds a bucket with
generated sample documents, runs the ``s3-ingest`` flow twice into an emptied folder (the
first run is a first run however often the demo runs; the second
run shows the incremental path: nothing changed, no GET), prints the summary
and a sample query, and stops the server. Then the ``github-pulls`` flow
(``dev.github_demo``) and the ``rest-ingest`` flow over the two example
source files of ``sources/`` (``dev.rest_demo``), each on a local server.

The flows need a Prefect API, found or started as the ``ingest`` commands find or start
theirs (``deployments.local_api.command_api``): the configured one, a running ``ingest
serve``, else a local server of its own for the demo's length.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import shutil
import sys
from pathlib import Path

import boto3
import typer

from dev import samples
from dev.github_demo import run_github_demo
from dev.rest_demo import run_rest_demo
from dev.servers.s3 import DevServer
from ingest import search, storage
from ingest.report import console

BUCKET = "demo-documents"
PREFIX = "incoming/"


def seed(endpoint_url: str) -> int:
    client = boto3.client("s3", endpoint_url=endpoint_url, region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    docs = samples.documents()
    for key, body in docs.items():
        client.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=body)
    return len(docs)


# Written into the demo's folder: a folder holding it is the demo's own, which a next demo
# empties first (its "first run" is then a first run); any other folder that is not empty
# is refused, never emptied.
MARKER = ".ingest-demo"
DEFAULT_DATA_DIR = Path("data/demo")


class NotTheDemosFolder(Exception):
    """--data-dir names a folder with files the demo did not write."""


def fresh_data_dir(data_dir: Path, *, default: bool) -> None:
    """Make ``data_dir`` an empty folder of the demo's: created when absent, emptied when
    an earlier demo wrote it (its marker, or ``default``: data/demo is the demo's own)."""
    if data_dir.is_dir() and any(data_dir.iterdir()):
        if not (default or (data_dir / MARKER).is_file()):
            raise NotTheDemosFolder(
                f"{data_dir} holds files the demo did not write: give --data-dir an empty "
                "or new folder (the demo empties its own folder before each run)"
            )
        shutil.rmtree(data_dir)
    elif data_dir.exists() and not data_dir.is_dir():
        raise NotTheDemosFolder(f"{data_dir} is a file: give --data-dir a folder")
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / MARKER).write_text(
        "Written by the demo (python -m dev.demo): the next demo empties this folder.\n",
        encoding="utf-8",
    )


def duckdb_command(database: Path) -> str:
    """The command that opens ``database`` in the DuckDB CLI on this machine: ``duckdb``
    when it is on PATH, else the one installed beside this Python (``.venv/bin/duckdb``),
    named as the user can type it from here."""
    if shutil.which("duckdb"):
        return f"duckdb {database}"
    beside = Path(sys.executable).parent / "duckdb"
    if beside.is_file():
        # absolute() keeps the virtualenv's bin folder (resolve() would follow the python link)
        exe = beside.absolute()
        with contextlib.suppress(ValueError):
            exe = exe.relative_to(Path.cwd())
        return f"{exe} {database}"
    return f"{Path(sys.executable).parent / 'ingest'} query --data-dir {database.parent} SQL"


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
    typer.echo(f"\nOpen the same tables with: {duckdb_command(data_dir / 'warehouse.duckdb')}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m dev.demo``: the exit code of the demo (2 when no Prefect server could be
    started, 130 on Ctrl-C)."""
    parser = argparse.ArgumentParser(
        prog="python -m dev.demo",
        description="The main job end to end on embedded defaults: local S3, local APIs, "
        "local tables; no account, no network.",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_DATA_DIR,
        help="Output folder, emptied first when an earlier demo wrote it [data/demo].",
    )
    args = parser.parse_args(argv)
    try:
        fresh_data_dir(args.data_dir, default=args.data_dir == DEFAULT_DATA_DIR)
    except NotTheDemosFolder as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    from deployments.local_api import ServerStartError, command_api

    try:
        with command_api(echo=lambda line: typer.echo(line, err=True)):
            return run(args.data_dir)
    except ServerStartError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130


if __name__ == "__main__":
    code = main()
    gc.freeze()  # as the ingest command does: no final collection over Prefect's heap
    sys.exit(code)
