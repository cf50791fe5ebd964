"""The ``ingest`` command: its commands, each thin (parse the options, call one
function, print). How a command runs a flow is ``cli.running``; what it prints,
``cli.output``; the options the commands share, ``cli.options``; the commands on the
Prefect side (alerts, serve, server), ``cli.serving``.

Every option falls back to an ``INGEST_*`` environment variable through
``Settings`` (``INGEST_S3_BUCKET``, ``INGEST_DATA_DIR`` ...).
"""

from __future__ import annotations

import gc
from typing import Annotated, Literal, cast

import typer
from pydantic import ValidationError

from cli import serving
from cli.options import (
    DataDir,
    PlainUsage,
    TaskRunnerOption,
    checked,
    lake_of,
    lake_with_tables,
    runner_choice,
    setting_option,
)
from cli.output import check_format, print_rows, print_summary, print_table, with_final_seconds
from cli.running import FLOW_COMMANDS, run_flow, started_up
from cli.serving import FROM_A_CHECKOUT
from ingest.settings import Settings

# The help as a terminal shows it: plain text (the module's docstring is reStructuredText).
HELP = """Run the ingestion flows once and read their outputs.

Every option falls back to an INGEST_* environment variable (INGEST_S3_BUCKET,
INGEST_DATA_DIR ...); docs/reference/cli.md and docs/reference/settings.md list them.
Exit codes: 0 done; 2 a mistake to fix, said in one line before or instead of any work (an
option, a setting, a data folder, the SQL of a query, credentials, a Prefect server that
cannot start); 1 work that failed once begun (a bug, ingest serve's server or deploy
failing); 130 interrupted."""


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help=HELP,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)


@app.callback()
def options(
    ctx: typer.Context,
    debug: Annotated[
        bool,
        typer.Option(
            "--debug",
            help="Show the traceback of a configuration or environment error too.",
        ),
    ] = False,
) -> None:
    ctx.obj = {"debug": debug}
    if ctx.invoked_subcommand not in FLOW_COMMANDS:
        started_up()  # the other commands' imports are few; collection as usual


# The bounds of the s3-ingest flow's bucket parameter (S3's own), checked by the command
# before it imports the flow (and Prefect with it); tests/cli/test_cli_options.py compares them.
BUCKET_LENGTH = (3, 63)


@app.command("s3")
def s3_command(
    ctx: typer.Context,
    bucket: Annotated[str | None, setting_option("s3_bucket", "Bucket")] = None,
    prefix: Annotated[str | None, setting_option("s3_prefix", "Key prefix")] = None,
    endpoint_url: Annotated[
        str | None, setting_option("s3_endpoint_url", "S3-compatible endpoint")
    ] = None,
    include: Annotated[list[str] | None, typer.Option(help="Glob to keep (repeatable).")] = None,
    exclude: Annotated[list[str] | None, typer.Option(help="Glob to drop (repeatable).")] = None,
    concurrency: Annotated[
        int | None, setting_option("s3_concurrency", "Requests in flight")
    ] = None,
    data_dir: DataDir = None,
    download_dir: Annotated[
        str | None,
        typer.Option(
            help="Objects land at DIR/<key below prefix>: a folder or s3://bucket/prefix."
        ),
    ] = None,
    keep_files: Annotated[
        bool,
        setting_option(
            "keep_files",
            "Keep the downloaded objects; --no-keep-files drops each once its text is extracted",
        ),
    ] = True,
    task_runner: TaskRunnerOption = None,
    full_refresh: Annotated[bool, typer.Option(help="Ignore the manifest.")] = False,
    extract: Annotated[
        bool, typer.Option(help="Extract the text of new and changed objects (documents).")
    ] = True,
    listing: Annotated[
        str, typer.Option(help="list (LIST calls) or inventory (an S3 Inventory report).")
    ] = "list",
    inventory: Annotated[
        str | None,
        typer.Option(help="With --listing inventory: s3://... of the report or its config."),
    ] = None,
    list_shards: Annotated[
        int | None, setting_option("s3_list_shards", "Key-range shards listed concurrently")
    ] = None,
) -> None:
    """Run the s3-ingest flow once and print its summary."""
    runner = runner_choice(task_runner)
    if listing not in ("list", "inventory"):
        raise typer.BadParameter("use list or inventory", param_hint="--listing")
    if listing == "inventory" and not inventory:
        raise typer.BadParameter(
            "--listing inventory needs --inventory s3://... (the report or its config)",
            param_hint="--inventory",
        )
    settings = Settings()
    bucket = bucket or settings.s3.bucket
    if not bucket:
        raise typer.BadParameter("give --bucket or set INGEST_S3_BUCKET", param_hint="--bucket")
    if not BUCKET_LENGTH[0] <= len(bucket) <= BUCKET_LENGTH[1]:  # said before Prefect imports
        raise typer.BadParameter(
            f"a bucket name has {BUCKET_LENGTH[0]} to {BUCKET_LENGTH[1]} characters",
            param_hint="--bucket",
        )
    from flows.s3_ingest import s3_ingest

    summary = run_flow(
        ctx,
        s3_ingest,
        bucket=bucket,
        prefix=settings.s3.prefix if prefix is None else prefix,
        endpoint_url=endpoint_url,
        include=include,
        exclude=exclude,
        concurrency=concurrency,
        data_dir=str(data_dir) if data_dir else None,
        download_dir=download_dir,
        full_refresh=full_refresh,
        extract=extract,
        keep_files=keep_files and settings.keep_files,
        task_runner=runner,
        list_shards=list_shards,
        listing=cast(Literal["list", "inventory"], listing),
        inventory=inventory,
    )
    print_summary(summary, data_dir)


@app.command("reextract")
def reextract_command(
    ctx: typer.Context,
    bucket: Annotated[str | None, typer.Option(help="Bucket [env INGEST_S3_BUCKET].")] = None,
    prefix: Annotated[str | None, typer.Option(help="Key prefix [env INGEST_S3_PREFIX].")] = None,
    endpoint_url: Annotated[
        str | None, typer.Option(help="S3-compatible endpoint [env INGEST_S3_ENDPOINT_URL].")
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            help="Only documents of this kind: pdf, dxf, dwg, docx, html, txt (repeatable)."
        ),
    ] = None,
    since_version: Annotated[
        str | None,
        typer.Option(
            help="Also the documents extracted by this extractor release (like 2.0) or a "
            "later one, even where their extractor is current."
        ),
    ] = None,
    data_dir: DataDir = None,
    task_runner: TaskRunnerOption = None,
) -> None:
    """Extract again, now, the stored documents whose recorded extractor (code, library
    versions, options) differs from the current one, as the next night would: from the
    kept copy where there is one, else fetched again. A run of the s3-ingest flow, so new
    and changed objects are fetched as in any run."""
    runner = runner_choice(task_runner)
    settings = Settings()
    bucket = bucket or settings.s3.bucket
    if not bucket:
        raise typer.BadParameter("give --bucket or set INGEST_S3_BUCKET", param_hint="--bucket")
    if since_version is not None:
        from ingest.s3.changes import release_numbers

        checked(release_numbers, since_version, "--since-version")
    from flows.s3_ingest import s3_ingest

    summary = run_flow(
        ctx,
        s3_ingest,
        bucket=bucket,
        prefix=settings.s3.prefix if prefix is None else prefix,
        endpoint_url=endpoint_url,
        data_dir=str(data_dir) if data_dir else None,
        task_runner=runner,
        keep_files=settings.keep_files,
        reextract_kinds=kind or None,
        reextract_since=since_version,
    )
    print_summary(summary, data_dir)


@app.command("github")
def github_command(
    ctx: typer.Context,
    repo: Annotated[list[str], typer.Option("--repo", help="owner/name (repeatable).")],
    base_url: Annotated[str | None, setting_option("github_base_url", "API root")] = None,
    per_page: Annotated[
        int | None,
        typer.Option(
            min=1,
            max=100,
            help="Items per page [planned from the measured latency and the budget].",
        ),
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, max=100, help="Most requests in flight [100, GitHub's ceiling]."),
    ] = None,
    state: Annotated[str | None, typer.Option(help="open, closed or all [all].")] = None,
    rate_limit_reserve: Annotated[
        int | None, typer.Option(min=0, help="Requests of the hourly budget never spent [100].")
    ] = None,
    max_wait: Annotated[
        float | None,
        typer.Option(
            min=0,
            help="Longest wait in seconds for the rate limit to reset; beyond it the run stops "
            "cleanly [900].",
        ),
    ] = None,
    token_block: Annotated[
        str | None, typer.Option(help="Prefect Secret block with the token [default GITHUB_TOKEN].")
    ] = None,
    data_dir: DataDir = None,
    full_refresh: Annotated[bool, typer.Option(help="Ignore stored ETags and watermarks.")] = False,
    task_runner: TaskRunnerOption = None,
) -> None:
    """Run the github-pulls flow once and print its summary."""
    runner = runner_choice(task_runner)
    from ingest.rest.summary import headline

    if state not in (None, "open", "closed", "all"):
        raise typer.BadParameter("use open, closed or all", param_hint="--state")
    from ingest.rest.source import check_repo

    for r in repo:
        checked(check_repo, r, "--repo")
    from flows.github_pulls import github_pulls

    summary = run_flow(
        ctx,
        github_pulls,
        repos=repo,
        state=state,
        per_page=per_page,
        concurrency=concurrency,
        base_url=base_url,
        token_block=token_block,
        rate_limit_reserve=rate_limit_reserve,
        max_wait=max_wait,
        data_dir=str(data_dir) if data_dir else None,
        full_refresh=full_refresh,
        task_runner=runner,
    )
    typer.echo(with_final_seconds(headline(summary), summary.run_id, data_dir))
    for r in summary.repos:
        note = "complete" if r["complete"] else f"incomplete: {r['stop_reason']}"
        typer.echo(
            f"  {r['repo']}: {r['pull_requests']} pull requests, {r['requests']} requests, {note}"
        )


# ``ingest rest``'s exit when the run finished but a listing is incomplete (2: refused
# before it ran; 1: failed)
INCOMPLETE = 3


@app.command("rest", cls=PlainUsage)
def rest_command(
    ctx: typer.Context,
    source: Annotated[
        str, typer.Argument(metavar="SOURCE", help="Source file (YAML), e.g. sources/tickets.yaml.")
    ],
    base_url: Annotated[
        str | None, typer.Option(help="API root instead of the file's client.base_url.")
    ] = None,
    concurrency: Annotated[
        int | None,
        typer.Option(min=1, max=256, help="Most requests in flight [the file's concurrency]."),
    ] = None,
    data_dir: DataDir = None,
    full_refresh: Annotated[bool, typer.Option(help="Ignore stored watermarks.")] = False,
    task_runner: TaskRunnerOption = None,
) -> None:
    """Run the rest-ingest flow once for a declared source and print its summary; exit 3
    when a listing stopped before its paginator's own end (the run is incomplete)."""
    runner = runner_choice(task_runner)
    from ingest.rest.source import SourceError, load_source, source_path

    try:  # a missing or wrong file is said before Prefect imports, as the flow would say it
        load_source(source_path(source))
    except SourceError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    from flows.rest_ingest import rest_ingest
    from ingest.rest.records import GitHubSummary
    from ingest.rest.summary import headline, listing_lines

    summary = run_flow(
        ctx,
        rest_ingest,
        source=source,
        base_url=base_url,
        concurrency=concurrency,
        data_dir=str(data_dir) if data_dir else None,
        full_refresh=full_refresh,
        task_runner=runner,
    )
    typer.echo(with_final_seconds(headline(summary), summary.run_id, data_dir))
    if isinstance(summary, GitHubSummary):  # a source of client.dialect github
        for line in listing_lines(summary):
            typer.echo(f"  {line}")
    for r in summary.resources:
        note = "complete" if r["complete"] else f"incomplete: {r['note']}"
        typer.echo(
            f"  {r['resource']} -> {r['table']}: {r['records']} records"
            f"{f' (unchanged {u})' if (u := r.get('unchanged')) else ''}, "
            f"{r['listings']} listings, {r['requests']} requests, {note}"
        )
    from ingest.rest.summary import schema_line

    for change in getattr(summary, "schema_changes", []):
        typer.echo(f"  schema: {schema_line(change)}")
    if not summary.complete:
        # a listing that did not reach its paginator's own end: the run is not a whole
        # copy, which a scheduler or script must be able to tell from a success
        short = [r["resource"] for r in summary.resources if not r["complete"]] or [
            r["repo"] for r in getattr(summary, "repos", []) if not r.get("complete")
        ]
        typer.echo(f"incomplete: {', '.join(map(str, short))} (exit 3)", err=True)
        raise typer.Exit(INCOMPLETE)


@app.command("schema", cls=PlainUsage)
def schema_command(
    source: Annotated[
        str,
        typer.Argument(
            metavar="SOURCE", help="Source name (its tables are SOURCE__*; github: pull_requests)."
        ),
    ],
    resource: Annotated[
        str | None,
        typer.Argument(
            metavar="RESOURCE",
            help="Resource (or table: pull_requests) name; its child tables too.",
        ),
    ] = None,
    data_dir: DataDir = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
) -> None:
    """Every column change of a REST source's tables (schema_history), oldest first."""
    from ingest import storage

    check_format(format, ("table", "csv", "json"))

    def quoted(text: str) -> str:
        return "'" + text.replace("'", "''") + "'"

    # every table of the source (the GitHub dialect's: pull_requests and its child tables),
    # or the resource's table (SOURCE__RESOURCE, or a dialect's own: github pull_requests)
    # and its child tables
    where = ""
    if resource:
        names = (f"{source}__{resource}", resource)
        each = [
            f"table_name = {quoted(t)} OR starts_with(table_name, {quoted(t + '__')})"
            for t in names
        ]
        where = f" AND ({' OR '.join(each)})"
    columns, rows = storage.query_read_only(
        lake_with_tables(data_dir),
        "SELECT table_name, column_name, change, old_type, new_type, base_column, run_id, "
        f"changed_at FROM schema_history WHERE source = {quoted(source)}{where} "
        "ORDER BY changed_at, table_name, column_name",
    )
    print_rows(columns, rows, format)


@app.command("query", cls=PlainUsage)
def query_command(
    sql: Annotated[
        str, typer.Argument(metavar="SQL", help="SQL over s3_objects, s3_object_log, task_timings.")
    ],
    data_dir: DataDir = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table, csv or json.")] = "table",
) -> None:
    """Run SQL over the outputs (the same views the duckdb CLI sees), read-only: statements
    other than SELECT and EXPLAIN are refused, and no file but the tables' can be read. A
    refused statement, an SQL error and a data folder without tables exit 2."""
    from ingest import storage

    check_format(format, ("table", "csv", "json"))
    root = lake_with_tables(data_dir)
    try:
        columns, rows = storage.query_read_only(root, sql)
    except storage.ReadOnlyQueryError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except Exception as exc:  # duckdb raises many kinds; show the message, not a traceback
        # the query's own mistake, as a refused statement is: 2, as every mistake to fix
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    print_rows(columns, rows, format)


@app.command("warehouse")
def warehouse_command(data_dir: DataDir = None) -> None:
    """Bring warehouse.duckdb up to date for the duckdb CLI: views over a local lake, or a
    snapshot copy of the tables of a lake on object storage (which the stock CLI cannot
    read without extensions it would download)."""
    from ingest import storage

    lake = lake_of(data_dir)
    counts = storage.snapshot_warehouse(lake)
    where = lake.local_dir / storage.warehouse.WAREHOUSE
    if lake.remote:
        copied = ", ".join(f"{k} {v}" for k, v in counts.items() if v)
        typer.echo(f"{where}: a snapshot of {lake.root} ({copied or 'empty'})")
    else:
        typer.echo(f"{where}: views over {len(counts)} tables of {lake.root}")


@app.command("status")
def status_command(
    data_dir: DataDir = None,
    nights: Annotated[
        int, typer.Option("--nights", "-n", min=1, max=100, help="Nightly runs to list.")
    ] = 7,
) -> None:
    """Freshness of each source (last success, rows changed, lag now: every s3, github
    and rest run updates its own) and the last nightly runs' outcomes, from the tables (no
    Prefect server needed)."""
    from ingest.report import status

    root = lake_of(data_dir)
    fresh = status.freshness_now(root)
    typer.echo("Freshness (each flow and what it reads, updated by every run)")
    print_table(
        ["source", "reads", "last_success", "rows_changed", "lag", "last_run"],
        [
            (r["source"], r["target"], r["last_success"], r["rows_changed"], r["lag"], r["state"])
            for r in fresh
        ],
    )
    if not fresh:
        typer.echo(f"(no run has finished with {root.root} as its data folder yet)")
    typer.echo("")
    typer.echo(f"Last {nights} nights (runs of the nightly flow)")
    runs = status.last_nights(root, nights)
    print_table(
        ["started_at", "state", "seconds", "sources", "message"],
        [(r["started_at"], r["state"], r["seconds"], r["sources"], r["message"]) for r in runs],
        width=100,
    )
    if not runs:
        typer.echo(
            "(no nightly run yet: the nightly deployment runs s3 and github together "
            "and fills this; see ingest serve)"
        )


@app.command("search", cls=PlainUsage)
def search_command(
    words: Annotated[
        str, typer.Argument(metavar="WORDS", help="Words to find (all must match); Korean works.")
    ],
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=1000, help="Hits to show.")
    ] = 10,
    kind: Annotated[
        str | None, typer.Option(help="Only this kind: pdf, dxf, dwg, docx, html, txt ...")
    ] = None,
    data_dir: DataDir = None,
    format: Annotated[str, typer.Option("--format", "-f", help="table or json.")] = "table",
) -> None:
    """Ranked full-text search over the extracted text (SQLite FTS5, BM25; offline)."""
    from ingest import search

    check_format(format, ("table", "json"))
    root = lake_with_tables(data_dir)
    hits = search.search(root, words, limit=limit, kind=kind)
    if format == "json":
        fields = ["key", "kind", "score", "page", "heading", "chunk_id", "snippet"]
        print_rows(fields, [tuple(getattr(h, f) for f in fields) for h in hits], format)
        return
    print_table(
        ["key", "kind", "score", "page", "heading", "snippet"],
        [
            (h.key, h.kind, h.score, "" if h.page is None else h.page, h.heading, h.snippet)
            for h in hits
        ],
        width=100,
    )


@app.command(
    "demo",
    hidden=True,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def demo_command() -> None:
    """Say where the demo runs: from a checkout, ``make demo`` (``python -m dev.demo``)."""
    typer.echo(f"error: the demo {FROM_A_CHECKOUT}: make demo (python -m dev.demo)", err=True)
    raise typer.Exit(2)


app.command("alerts")(serving.alerts_command)
app.command("serve")(serving.serve_command)
app.add_typer(serving.server_app, name="server")


def main() -> None:
    # No cyclic collection while the command's modules load: ``started_up`` resumes it,
    # as a flow's run begins (``run_flow``) or before any other command.
    gc.disable()
    try:
        app()
    except ValidationError as exc:  # a setting's value (INGEST_*, .env): one line each
        if exc.title != Settings.__name__:
            raise
        for error in exc.errors():
            where = ".".join(str(p) for p in error["loc"])
            what = str(error["msg"]).removeprefix("Value error, ")
            typer.echo(f"error: setting {where}: {what}" if where else f"error: {what}", err=True)
        raise SystemExit(2) from None
    finally:
        # The work is done: spare the interpreter's final full collection over the
        # heap of Prefect, pydantic and pyarrow objects (~0.7 s at exit, measured).
        # Exit handlers (Prefect's log and event drains) still run as usual.
        gc.freeze()


if __name__ == "__main__":
    main()
