"""How a command runs a flow: its parameters checked before anything starts, a Prefect
API found or started, the flow run in this process as the command's own run, the console
kept to one line per mistake, Ctrl-C and SIGTERM turned into exit codes; and the end of the
command's start-up (``started_up``)."""

from __future__ import annotations

import gc
import logging
import os
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from ingest.settings import Settings

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


# The hooks of every ingestion flow, whose runs Prefect notes on the console.
BOOKKEEPING_HOOKS = ("read_flow_limit", "record_final_run")


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

        message = record.getMessage()
        if any(f"hook '{h}'" in message.lower() for h in BOOKKEEPING_HOOKS):
            return False  # Prefect's note of the flows' hooks: the limit, the run's record
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
