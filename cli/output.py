"""What the commands print: a run's summary with its final duration, and rows as a
table, CSV or JSON (``print_rows``, the one switch over ``--format``)."""

from __future__ import annotations

import csv
import json
import re
import sys
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, NoReturn

import typer

from ingest.settings import Settings


def fail(message: object, code: int = 2) -> NoReturn:
    """``error: message`` on stderr, and the command ends with ``code`` (2: a mistake to
    fix, said in one line; 1: work that failed once begun)."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def print_summary(summary: Any, data_dir: Path | str | None) -> None:
    from ingest.report import console

    typer.echo(with_final_seconds(console.run_summary(summary), summary.run_id, data_dir))


def with_final_seconds(text: str, run_id: str, data_dir: Path | str | None) -> str:
    """A summary written before its run ended, with the run's duration as Prefect recorded
    it once it ended (what the end-of-run hook wrote in its ``flow_runs`` row: from memory
    when this process ran the hook, else read from the row); as it was
    written (its figure "up to this summary") where that row cannot be read."""
    from ingest.report import history
    from ingest.report.timing import final_seconds
    from tasks.history import ended_seconds

    seconds = ended_seconds(run_id)  # what this process's end-of-run hook committed
    if seconds is not None:
        return final_seconds(text, seconds)
    try:
        row = history.flow_run(
            Settings().with_data_dir(str(data_dir) if data_dir else None).location, run_id
        )
    except Exception:  # the figure up to the summary, which says what it measures
        return text
    return final_seconds(text, float(row["seconds"])) if row and row["seconds"] else text


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


def check_format(format: str, choices: tuple[str, ...]) -> None:
    """``--format`` is one of ``choices``, else the option's usage error (exit 2)."""
    if format not in choices:
        raise typer.BadParameter(
            f"use {', '.join(choices[:-1])} or {choices[-1]}", param_hint="--format"
        )


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], format: str) -> None:
    """Rows as ``--format`` asks: csv, json (a list of objects) or a table."""
    if format == "csv":
        write_csv(columns, rows)
    elif format == "json":
        records = [dict(zip(columns, r, strict=True)) for r in rows]
        typer.echo(json.dumps(records, default=_json_default, ensure_ascii=False, indent=1))
    else:
        print_table(columns, rows)
