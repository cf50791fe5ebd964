"""The options the commands share: options backed by a setting (its bounds and its
default in ``--help``), the data folder and task runner, the lake a command reads, and the
usage line of commands with arguments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, cast

import typer

from cli.output import fail
from ingest.settings import Settings


class PlainUsage(typer.core.TyperCommand):
    """A command whose usage line names its arguments as the help's list does (``ingest
    search [OPTIONS] WORDS``): typer writes a required one in braces, ``{words}``, which
    reads as a set or a template to fill."""

    def collect_usage_pieces(self, ctx: Any) -> list[str]:
        return [
            p[1:-1] if p.startswith("{") and p.endswith("}") else p
            for p in super().collect_usage_pieces(ctx)
        ]


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


# The S3 options of the commands that run the s3-ingest flow.
Bucket = Annotated[str | None, setting_option("s3_bucket", "Bucket")]
Prefix = Annotated[str | None, setting_option("s3_prefix", "Key prefix")]
EndpointUrl = Annotated[str | None, setting_option("s3_endpoint_url", "S3-compatible endpoint")]

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


def checked(check: Callable[[Any], Any], value: Any, hint: str) -> None:
    """``check(value)``, its ValueError said as the option's usage error (exit 2)."""
    try:
        check(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from None


def command_lake(data_dir: str | None) -> Any:
    """The lake of the command: --data-dir or INGEST_DATA_DIR, with its endpoint and
    credentials settings, reached through one session for the command (its process: the
    credentials and client resolved once, not at each table read); a lake that cannot be
    reached ends the command with the setting to fix."""
    from ingest import catalog, storage
    from ingest.errors import TerminalError

    catalog.load()  # every table, for the command's queries (ingest.setup_process)
    try:
        lake = Settings().with_data_dir(data_dir).location
        lake = lake.bound(storage.location.LakeSession(lake))
        storage.location.check(lake)
    except (TerminalError, ValueError) as exc:
        fail(exc)
    return lake


def lake_with_tables(data_dir: str | None) -> Any:
    """``command_lake``, for a command that reads tables: a data folder that holds none (a
    mistyped --data-dir, or one no run has written) ends the command naming the folder,
    instead of answering 0 rows as if the tables were empty."""
    from ingest.storage import lake as tables

    lake = command_lake(data_dir)
    if not tables.tables_present(lake):
        fail(
            f"no tables in {lake.root}: no run has written this data folder (check "
            "--data-dir or INGEST_DATA_DIR; ingest s3, github and rest write it)"
        )
    return lake
