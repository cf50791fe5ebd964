"""The ``ingest`` command.

Every option falls back to an ``INGEST_*`` environment variable through
``Settings`` (``INGEST_S3_BUCKET``, ``INGEST_DATA_DIR`` ...).
"""

from __future__ import annotations

import csv
import gc
import json
import logging
import os
import re
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any, Literal, cast

import typer
from pydantic import ValidationError

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


class PlainUsage(typer.core.TyperCommand):
    """A command whose usage line names its arguments as the help's list does (``ingest
    search [OPTIONS] WORDS``): typer writes a required one in braces, ``{words}``, which
    reads as a set or a template to fill."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [
            p[1:-1] if p.startswith("{") and p.endswith("}") else p
            for p in super().collect_usage_pieces(ctx)
        ]


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


# The commands that run a flow: their start-up ends in ``run_flow``.
FLOW_COMMANDS = frozenset({"s3", "reextract", "github", "rest"})


def prefect_env() -> None:
    """Prefect's quiet, offline defaults for a command that needs no flow run of its own."""
    from deployments.local_api import prefect_defaults, use_running_serve

    prefect_defaults()
    use_running_serve()  # no temporary server per command while `ingest serve` runs


def foreground(flow_fn: Callable[..., Any], **parameters: Any) -> Any:
    """Run a flow in this process as the command's own run (``foreground_run``)."""
    with foreground_run():
        return flow_fn(**parameters)


def debugging(ctx: typer.Context) -> bool:
    """``ingest --debug ...``: tracebacks of the user's and the environment's mistakes too."""
    obj = ctx.find_root().obj
    return bool(isinstance(obj, dict) and obj.get("debug"))


def run_flow(ctx: typer.Context, flow_fn: Any, **parameters: Any) -> Any:
    """Run one flow as this command: its parameters checked against the flow's own bounds
    before anything starts, a Prefect API found or started (``command_api``), a mistake of
    configuration or environment (``TerminalError``) said in one line with exit code 2, and
    Ctrl-C ending the run with exit code 130. A bug of ours keeps its traceback."""
    from ingest.errors import TerminalError

    check_parameters(flow_fn, parameters)
    check_data_dir(parameters.get("data_dir"))
    # The engines' modules, which the flow's call imports, are start-up too.
    import prefect.flow_engine
    import prefect.task_engine  # noqa: F401

    from deployments.local_api import ServerStartError, command_api

    started_up()

    caught: dict[str, int] = {}  # the signal that stopped the run
    try:
        with (
            command_api(echo=lambda line: typer.echo(line, err=True)),
            first_interrupt(caught),
        ):
            quiet = None if debugging(ctx) else quiet_console()
            try:
                return foreground(flow_fn, **parameters)
            finally:
                if quiet is not None:
                    quiet.remove()
    except TerminalError as exc:
        typer.echo(f"error: {exc}", err=True)
        if not debugging(ctx):
            typer.echo("(the run's logs keep the traceback; --debug shows it here)", err=True)
        raise typer.Exit(2) from None
    except ServerStartError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        terminated = caught.get("signal") == signal.SIGTERM
        typer.echo(
            f"{'terminated (SIGTERM)' if terminated else 'interrupted'}: the run stopped; what "
            "it had fetched is kept, and the next run goes on from there",
            err=True,
        )
        raise typer.Exit(143 if terminated else 130) from None


@contextmanager
def first_interrupt(caught: dict[str, int] | None = None) -> Iterator[dict[str, int]]:
    """The first Ctrl-C or SIGTERM stops the run soon: the requests not yet sent end at once
    (those in flight finish), then the run ends as Python's KeyboardInterrupt ends it;
    ``caught`` (yielded) says which signal came (exit code 130 for SIGINT, 143 for
    SIGTERM, as a shell reports a process those signals ended). A second one interrupts
    whatever is still cleaning up (a second SIGTERM ends the process at once)."""
    import threading

    caught = {} if caught is None else caught
    if threading.current_thread() is not threading.main_thread():
        yield caught
        return

    from ingest import interrupt

    def on_interrupt(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        caught.setdefault("signal", signum)
        interrupt.request()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, on_interrupt)
    previous_term = signal.signal(signal.SIGTERM, on_interrupt)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
        interrupt.clear()


def check_parameters(flow_fn: Any, parameters: dict[str, Any]) -> None:
    """The flow's own validation (the bounds of its parameters' ``Field``s, the same the UI's
    run form shows), before a server starts: an invalid value costs milliseconds, not the
    server's start-up."""
    from prefect.exceptions import ParameterTypeError

    # Prefect logs the refusal at ERROR with every parameter, three lines the one below says.
    prefect_flows = logging.getLogger("prefect.flows")
    level = prefect_flows.level
    prefect_flows.setLevel(logging.CRITICAL)
    try:
        flow_fn.validate_parameters(parameters)
    except ParameterTypeError as exc:
        lines = [ln.strip(" -") for ln in str(exc).splitlines()[1:] if ln.strip()]
        typer.echo(f"error: invalid option: {'; '.join(lines) or exc}", err=True)
        raise typer.Exit(2) from None
    finally:
        prefect_flows.setLevel(level)


def check_data_dir(data_dir: str | None) -> None:
    """A local data folder that cannot be one (a file, or under a file) is refused at once."""
    root = data_dir or str(Settings().data_dir)
    if "://" in root:
        return
    path = Path(root).expanduser()
    if "%" in str(path.resolve()):
        typer.echo(
            f"error: the data folder {path} has a '%' in its path, which the table format's "
            "library (delta-rs) cannot open: choose another folder",
            err=True,
        )
        raise typer.Exit(2)
    for p in (path, *path.parents):
        if p.exists():
            if not p.is_dir():
                typer.echo(
                    f"error: the data folder {path} cannot be created: {p} is a file "
                    "(give --data-dir or INGEST_DATA_DIR a folder)",
                    err=True,
                )
                raise typer.Exit(2)
            return


class QuietConsole:
    """On the console, a ``TerminalError`` is said once, by the command, without the
    tracebacks Prefect prints for the failed task and flow (their records still reach the
    run's logs in the API: the filter sits on the console handlers only)."""

    def __init__(self, handlers: list[logging.Handler]) -> None:
        self.handlers = handlers
        self.texts: set[str] = set()
        for h in handlers:
            h.addFilter(self)

    def filter(self, record: logging.LogRecord) -> bool:
        from ingest.errors import TerminalError

        if "hook 'record_final_run'" in record.getMessage().lower():
            return False  # Prefect's bookkeeping of the run's own end-of-run record
        marked = getattr(record, "terminal_error", None)  # tasks.logs.OneTraceback's mark
        if marked is not None:
            first = marked.strip().splitlines()
            if first:
                self.texts.add(first[0])
            return False
        exc = record.exc_info[1] if record.exc_info else None
        while exc is not None:
            if isinstance(exc, TerminalError):
                first = str(exc).strip().splitlines()
                if first:  # states quote the message with its newlines escaped
                    self.texts.add(first[0])
                return False
            exc = exc.__cause__ or exc.__context__
        if self.texts:
            message = record.getMessage()
            return not any(t in message for t in self.texts)
        return True

    def remove(self) -> None:
        for h in self.handlers:
            h.removeFilter(self)


def quiet_console() -> QuietConsole:
    from prefect.logging.handlers import PrefectConsoleHandler

    found: list[logging.Handler] = []
    for name in (None, "prefect", "prefect.flow_runs", "prefect.task_runs"):
        for h in logging.getLogger(name).handlers:
            if isinstance(h, PrefectConsoleHandler) and h not in found:
                found.append(h)
    return QuietConsole(found)


@contextmanager
def foreground_run() -> Iterator[None]:
    """A flow run of this command, in this process: without Prefect's flow-run heartbeat
    thread unless ``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` is set.

    Heartbeats let the server mark a deployment's run crashed when its process is gone
    (Prefect's zombie detection is for runs triggered by deployments; those keep them). A
    foreground command ends with its process, and at its end Prefect joins the heartbeat
    thread while it sleeps out its current second: 0.5 s on average, up to 1 s, on every
    command (measured: benchmarks/commands.md).
    """
    from prefect.context import SettingsContext
    from prefect.settings import get_current_settings

    if any(k in os.environ for k in _HEARTBEAT_VARIABLES):
        yield
        return
    # A copy of the current settings with only that field changed: 0.1 ms, where
    # temporary_settings builds the whole settings model again (22 ms).
    settings = get_current_settings()
    flows = settings.flows.model_copy(update={"heartbeat_frequency": None})
    current = SettingsContext.get()
    assert current is not None  # prefect's import enters the root settings context
    with SettingsContext(
        profile=current.profile, settings=settings.model_copy(update={"flows": flows})
    ):
        yield


_HEARTBEAT_VARIABLES = ("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "PREFECT_RUNNER_HEARTBEAT_FREQUENCY")


def setting_option(name: str, help: str, *decls: str) -> Any:
    """A typer option backed by the setting ``name``: its bounds (``ge``/``le``) checked by
    the command line itself, before anything is imported or started, and its help saying
    the variable and the default of ``Settings``, read from the field, so ``--help`` cannot
    drift from the runs (a hand-written "[..., 1]" once stood beside a default of 4)."""
    field = Settings.field_of(name)
    if field is None:
        raise KeyError(f"no setting {name}")
    bounds: dict[str, Any] = {}
    for m in field.metadata:
        if getattr(m, "ge", None) is not None:
            bounds["min"] = m.ge
        if getattr(m, "gt", None) is not None and field.annotation is int:
            bounds["min"] = m.gt + 1
        if getattr(m, "le", None) is not None:
            bounds["max"] = m.le
    shown = default_text(field.get_default(call_default_factory=True))
    where = f"env INGEST_{name.upper()}" + (f", default {shown}" if shown else "")
    return typer.Option(*decls, help=f"{help} [{where}].", show_default=False, **bounds)


def default_text(value: Any) -> str:
    """A setting's default as ``--help`` shows it: empty for none."""
    if value is None or value == "" or value == []:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


DataDir = Annotated[
    str | None,
    setting_option(
        "data_dir",
        "Output folder, or s3://bucket/prefix for a lake on object storage",
        "--data-dir",
    ),
]
TaskRunnerOption = Annotated[
    str | None,
    setting_option(
        "task_runner",
        "thread (this process) or dask (the cluster at INGEST_DASK_ADDRESS, else a LocalCluster)",
        "--task-runner",
    ),
]


def runner_choice(task_runner: str | None) -> Literal["thread", "dask"]:
    """The option, else INGEST_TASK_RUNNER (the flows' own default is thread)."""
    choice = task_runner or Settings().task_runner
    if choice not in ("thread", "dask"):
        raise typer.BadParameter("use thread or dask", param_hint="--task-runner")
    return cast(Literal["thread", "dask"], choice)


def lake_of(data_dir: str | None) -> Any:
    """The lake of the command: --data-dir or INGEST_DATA_DIR, with its endpoint and
    credentials settings, reached through one session for the command (its process: the
    credentials and client resolved once, not at each table read); a lake that cannot be
    reached ends the command with the setting to fix."""
    from ingest import storage
    from ingest.errors import TerminalError

    try:
        lake = Settings().with_data_dir(data_dir).location
        lake = lake.bound(storage.location.LakeSession(lake))
        storage.location.check(lake)
    except (TerminalError, ValueError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    return lake


def lake_with_tables(data_dir: str | None) -> Any:
    """``lake_of``, for a command that reads tables: a data folder that holds none (a
    mistyped --data-dir, or one no run has written) ends the command naming the folder,
    instead of answering 0 rows as if the tables were empty."""
    from ingest.storage import lake as tables

    lake = lake_of(data_dir)
    if not tables.tables_present(lake):
        typer.echo(
            f"error: no tables in {lake.root}: no run has written this data folder (check "
            "--data-dir or INGEST_DATA_DIR; ingest s3, github and rest write it)",
            err=True,
        )
        raise typer.Exit(2)
    return lake


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


def checked(check: Callable[[Any], Any], value: Any, hint: str) -> None:
    """``check(value)``, its ValueError said as the option's usage error (exit 2)."""
    try:
        check(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


def print_summary(summary: Any, data_dir: Path | str | None) -> None:
    from ingest.report import console

    typer.echo(with_final_seconds(console.run_summary(summary), summary.run_id, data_dir))


def with_final_seconds(text: str, run_id: str, data_dir: Path | str | None) -> str:
    """A summary written before its run ended, with the run's duration as Prefect recorded
    it once it ended (its ``flow_runs`` row, which the end-of-run hook wrote); as it was
    written (its figure "up to this summary") where that row cannot be read."""
    from ingest.report import history
    from ingest.report.timing import final_seconds

    try:
        row = history.flow_run(
            Settings().with_data_dir(str(data_dir) if data_dir else None).location, run_id
        )
    except Exception:  # the figure up to the summary, which says what it measures
        return text
    return final_seconds(text, float(row["seconds"])) if row and row["seconds"] else text


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

    if format not in ("table", "csv", "json"):
        raise typer.BadParameter("use table, csv or json", param_hint="--format")

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
    if format == "csv":
        write_csv(columns, rows)
    elif format == "json":
        records = [dict(zip(columns, r, strict=True)) for r in rows]
        typer.echo(json.dumps(records, default=_json_default, ensure_ascii=False, indent=1))
    else:
        print_table(columns, rows)


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

    if format not in ("table", "csv", "json"):
        raise typer.BadParameter("use table, csv or json", param_hint="--format")
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
    if format == "csv":
        write_csv(columns, rows)
    elif format == "json":
        records = [dict(zip(columns, r, strict=True)) for r in rows]
        typer.echo(json.dumps(records, default=_json_default, ensure_ascii=False, indent=1))
    else:
        print_table(columns, rows)


# Control characters but tab and line ends (which CSV quotes): an S3 key or an API's text
# holding ESC sequences would otherwise drive the terminal the CSV is printed on.
_CSV_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def write_csv(columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    """Rows as CSV on stdout, control characters shown as ``\\xNN`` (``-f json`` keeps
    them exactly, escaped as JSON escapes them)."""

    def safe(value: Any) -> Any:
        if isinstance(value, str):
            return _CSV_CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)
        return value

    w = csv.writer(sys.stdout)
    w.writerow([safe(c) for c in columns])
    w.writerows([safe(v) for v in row] for row in rows)


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    return str(value)


def print_table(columns: list[str], rows: list[tuple[Any, ...]], width: int = 60) -> None:
    from ingest.report import console

    typer.echo(console.table(columns, rows, width))


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

    if format not in ("table", "json"):
        raise typer.BadParameter("use table or json", param_hint="--format")
    root = lake_with_tables(data_dir)
    hits = search.search(root, words, limit=limit, kind=kind)
    if format == "json":
        rows = [
            {
                "key": h.key,
                "kind": h.kind,
                "score": h.score,
                "page": h.page,
                "heading": h.heading,
                "chunk_id": h.chunk_id,
                "snippet": h.snippet,
            }
            for h in hits
        ]
        typer.echo(json.dumps(rows, ensure_ascii=False, indent=1))
        return
    print_table(
        ["key", "kind", "score", "page", "heading", "snippet"],
        [
            (h.key, h.kind, h.score, "" if h.page is None else h.page, h.heading, h.snippet)
            for h in hits
        ],
        width=100,
    )


# The demo needs the development tools of a checkout (dev/: the local servers and the sample
# documents), which the package leaves out. The command stays, hidden, to say where it went.
FROM_A_CHECKOUT = "runs from a checkout of the project"


@app.command(
    "demo",
    hidden=True,
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
)
def demo_command() -> None:
    """Say where the demo runs: from a checkout, ``make demo`` (``python -m dev.demo``)."""
    typer.echo(f"error: the demo {FROM_A_CHECKOUT}: make demo (python -m dev.demo)", err=True)
    raise typer.Exit(2)


@app.command("alerts")
def alerts_command(
    output: Annotated[
        Path | None,
        typer.Option(help="Write the automations here (for prefect automation create -f)."),
    ] = None,
    apply: Annotated[
        bool, typer.Option(help="Create them on the configured server (as ingest serve does).")
    ] = False,
) -> None:
    """The alerts of automations.yaml for the configured Prefect server, with the id of the
    INGEST_ALERT_BLOCK notification block and the INGEST_ALERT_* windows filled in."""
    prefect_env()
    from deployments import alerts

    settings = Settings()
    if not settings.alert.block:
        typer.echo("error: set INGEST_ALERT_BLOCK to <block type slug>/<name>", err=True)
        raise typer.Exit(2)
    try:
        if apply:
            typer.echo(f"created: {', '.join(alerts.apply(settings))}")
            return
        text = alerts.as_json(alerts.render(alerts.block_id(settings.alert.block), settings))
    except alerts.AlertConfigError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from exc
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n", encoding="utf-8")
        typer.echo(f"wrote {output}; now: prefect automation create --from-file {output}")


@app.command("serve")
def serve_command(
    demo: Annotated[bool, typer.Option(hidden=True)] = False,
    port: Annotated[
        int, typer.Option(min=1, max=65535, help="Port of the local Prefect server and UI.")
    ] = 4200,
    database_url: Annotated[
        str | None,
        typer.Option(
            help="Database of the local Prefect server: "
            "postgresql+asyncpg://user:password@host:5432/database (the password is never "
            "shown; on the command line `ps` shows it: prefer the variable, or a file named "
            "by INGEST_SERVE_DATABASE_URL_FILE) [env INGEST_SERVE_DATABASE_URL, default "
            "SQLite under PREFECT_HOME].",
            show_default=False,
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address the local Prefect server listens on; beyond loopback (0.0.0.0, "
            "a LAN address) it needs API auth, and TLS in front (docs/security.md)."
        ),
    ] = "127.0.0.1",
    api_auth: Annotated[
        bool,
        typer.Option(
            "--auth/--no-auth",
            help="Check an auth string on every API request of the local server (the "
            "operator's PREFECT_SERVER_API_AUTH_STRING, else one generated and kept in "
            "PREFECT_HOME/ingest-api-auth, mode 0600); --no-auth only on loopback.",
        ),
    ] = True,
) -> None:
    """Serve the deployments of prefect.yaml on this machine: the configured Prefect API
    (else a local server), the work pools, the deployments, a worker per pool. Ctrl-C
    stops all."""
    if demo:  # its local servers are dev tools of a checkout, which the package leaves out
        typer.echo(
            f"error: the demo {FROM_A_CHECKOUT}: make serve SERVE_ARGS=--demo "
            "(python -m dev.serve_demo)",
            err=True,
        )
        raise typer.Exit(2)
    prefect_env()
    from deployments import auth, database, local_api, serve
    from ingest.redact import redact

    # Its server takes over from the one the commands kept: not two servers on one database.
    if (kept := local_api.stop_kept()) is not None:
        typer.echo(f"stopped the local Prefect server the commands kept (pid {kept})")

    try:
        code = serve.run(
            port=port, database_url=database_url, echo=typer.echo, host=host, api_auth=api_auth
        )
    except (database.DatabaseUrlError, auth.ServeAuthError) as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(2) from None
    except RuntimeError as exc:
        typer.echo(f"error: {redact(str(exc))}", err=True)
        raise typer.Exit(1) from None
    raise typer.Exit(code)


server_app = typer.Typer(
    help="The local Prefect server the commands keep when no Prefect API is configured "
    "(PREFECT_API_URL, a profile's, or a running ingest serve): the first command that needs "
    "it starts it, and it stops once unused for INGEST_SERVE_LOCAL_SERVER_IDLE seconds.",
    no_args_is_help=True,
)
app.add_typer(server_app, name="server")


@server_app.command("start")
def server_start_command() -> None:
    """Start the local server now (or find it running) and say where it is."""
    from deployments import local_api

    local_api.prefect_defaults()
    idle = local_api.local_server_idle()
    if idle <= 0:
        typer.echo(
            "error: INGEST_SERVE_LOCAL_SERVER_IDLE is 0: each command starts and stops a "
            "server of its own; set it to the seconds a kept server may stay unused",
            err=True,
        )
        raise typer.Exit(2)
    try:
        api_url, _auth = local_api.kept_api(lambda line: typer.echo(line, err=True), idle)
    except local_api.ServerStartError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    pid = local_api.read_kept().get("pid")
    typer.echo(f"local Prefect server at {api_url} (pid {pid}), kept until unused for {idle:g} s")


@server_app.command("stop")
def server_stop_command() -> None:
    """Stop the local server (the next command that needs one starts it again)."""
    from deployments import local_api

    pid = local_api.stop_kept()
    if pid is None:
        typer.echo("no local Prefect server runs")
    else:
        typer.echo(f"stopped the local Prefect server (pid {pid})")


@server_app.command("status")
def server_status_command() -> None:
    """Whether the local server runs, where, and since when a command last used it."""
    import time

    from deployments import local_api

    advert = local_api.find_kept()
    if advert is None:
        typer.echo("no local Prefect server runs")
        raise typer.Exit(1)
    unused = time.time() - local_api.kept_path().stat().st_mtime
    typer.echo(
        f"local Prefect server at {advert['api_url']} (pid {advert['pid']}), last used "
        f"{unused:.0f} s ago, stops once unused for {advert.get('idle', 0):g} s"
    )


def started_up() -> None:
    """The command's start-up is over: where ``main`` paused the cycle collector, what the
    imports built (Prefect's, pydantic's and pyarrow's modules, which live until exit)
    is set aside for good (``gc.freeze``) and collection resumes for what the work
    allocates. Paused, the imports ran no collection over their own growing heap, and
    frozen, the run's collections no longer walk it: ~0.3 s of CPU less per command
    (benchmarks/whole.md). Elsewhere (a test's process, a caller's) nothing changes."""
    if gc.isenabled():
        return
    gc.freeze()
    gc.enable()


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
