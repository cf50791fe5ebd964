"""DuckDB over the lake: views named like the tables, reading each table's current version.

A view lists the exact Parquet files of its table's current Delta version
(``read_parquet([...])``), so the stock ``duckdb`` CLI reads the tables with no
extension at all (nothing is downloaded at run time), and a file the table's
log does not name (a crashed writer's leftover, a stray copy) is never read.

* ``query`` and ``connect`` build the views in an in-memory database each time:
  always the current version, and never blocked by someone holding
  ``warehouse.duckdb`` open.
* ``refresh_warehouse`` writes the same views into ``warehouse.duckdb`` for people
  who open it with the CLI; runs call it after they commit. When another process
  holds the file it is left alone and refreshed by the next run (or
  ``ingest query``): the lake is the record, the database file only a convenience
  that can always be rebuilt.

Files a view names stay readable until vacuum removes them, which keeps every
file for ``vacuum_retention_hours`` (7 days by default) after it left the table.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ingest import duck
from ingest.storage import lake
from ingest.storage.tables import SPECS, TableSpec

log = logging.getLogger(__name__)

WAREHOUSE = "warehouse.duckdb"
_STAMP = ".warehouse-views"
_OWED = ".warehouse-owed"


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _duck_types(schema: pa.Schema) -> list[str]:
    with duck.connect() as con:
        return [str(t) for t in con.from_arrow(schema.empty_table()).types]


_TYPES: dict[str, list[str]] = {}


def view_sql(spec: TableSpec, files: Iterable[str]) -> str:
    """``SELECT`` over the given files of the table, columns in the schema's order."""
    schema = spec.schema
    types = _TYPES.get(spec.name)
    if types is None:
        types = _TYPES[spec.name] = _duck_types(schema)
    files = list(files)
    if not files:
        cols = ", ".join(
            f'CAST(NULL AS {t}) AS "{f.name}"' for f, t in zip(schema, types, strict=True)
        )
        return f"SELECT {cols} WHERE false"
    cols = ", ".join(
        f'CAST("{f.name}" AS {t}) AS "{f.name}"' for f, t in zip(schema, types, strict=True)
    )
    listing = ", ".join(_sql_str(f) for f in files)
    hive = "true" if spec.partition_by else "false"
    return (
        f"SELECT {cols} FROM read_parquet([{listing}], "
        f"hive_partitioning = {hive}, union_by_name = true)"
    )


def views(data_dir: Path) -> dict[str, str]:
    """View name -> ``SELECT`` for every table, at the tables' current versions."""
    return {
        name: view_sql(SPECS[name], lake.data_files(data_dir, name))
        for name in lake.table_names(data_dir)
    }


def create_views(con: duckdb.DuckDBPyConnection, data_dir: Path, *, temp: bool) -> None:
    kind = "TEMP VIEW" if temp else "VIEW"
    for name, body in views(data_dir).items():
        con.execute(f'CREATE OR REPLACE {kind} "{name}" AS {body}')


def connect(data_dir: Path) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per table at its current version."""
    con = duck.connect()
    create_views(con, data_dir, temp=True)
    return con


def query(
    data_dir: Path, sql: str, params: Iterable[Any] | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run SQL over the tables; returns column names and rows."""
    with connect(data_dir) as con:
        cur = con.execute(sql, list(params) if params else None)
        columns = [d[0] for d in cur.description or ()]
        return columns, cur.fetchall()


def refresh_warehouse(
    data_dir: Path, *, tables: Iterable[str] | None = None, wait_seconds: float = 5.0
) -> bool:
    """Make ``warehouse.duckdb`` hold views over the tables' current versions (with
    ``tables``, over those only: the ones a run just wrote; opening every table of the
    lake to list its files costs ~20 ms a table, the longest step of a small run's end).

    Returns True when the views are current. Another process holding the file
    (someone in the ``duckdb`` CLI, which opens read-write by default) is waited
    for a few seconds, then left alone.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    db = data_dir / WAREHOUSE
    stamp = data_dir / _STAMP
    owed = data_dir / _OWED  # an earlier refresh found the file busy: all views are owed
    if tables is None or not db.exists() or owed.exists():
        bodies = views(data_dir)
        signature: str | None = hashlib.sha256(repr(sorted(bodies.items())).encode()).hexdigest()
        if db.exists() and stamp.exists() and stamp.read_text() == signature:
            owed.unlink(missing_ok=True)
            return True
    else:
        present = set(lake.table_names(data_dir))
        bodies = {
            name: view_sql(SPECS[name], lake.data_files(data_dir, name))
            for name in sorted(set(tables) & present)
        }
        signature = None  # the stamp covers all views: it no longer holds
        if not bodies:
            return True
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with duck.connect(str(db)) as con:
                for name, body in bodies.items():
                    con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {body}')
            if signature is None:
                stamp.unlink(missing_ok=True)
            else:
                stamp.write_text(signature)
            owed.unlink(missing_ok=True)
            return True
        except duckdb.IOException as exc:  # held by another process
            if time.monotonic() > deadline:
                log.warning("warehouse.duckdb is busy, views not refreshed: %s", exc)
                owed.touch()  # the next refresh rebuilds every view, not only its tables
                return False
            time.sleep(0.2)


def scan(data_dir: Path, table: str, *, staged_run: str | None = None) -> str:
    """A parenthesised ``SELECT`` over ``table`` at its current version, for use in
    ``FROM``; with ``staged_run``, plus the rows that run has staged but not yet
    committed (a run reading its own figures before its commit)."""
    from ingest.storage import staging

    spec = SPECS[table]
    body = view_sql(spec, lake.data_files(data_dir, table))
    paths = staging.parts(data_dir, staged_run, table) if staged_run is not None else []
    if paths:
        listing = ", ".join(_sql_str(str(p)) for p in paths)
        day = f', CAST("{spec.day_from}" AS DATE) AS "day"' if spec.kind == "history" else ""
        body = (
            f"SELECT * FROM ({body}) UNION ALL BY NAME SELECT *{day} FROM read_parquet([{listing}])"
        )
    return f"({body})"
