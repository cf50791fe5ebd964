"""Parquet as the immutable record, DuckDB views over it.

Layout under ``data_dir``::

    tables/<table>/<run_id>/<part>.parquet   rows, one folder per run
    tables/<table>/_schema.parquet           zero rows: the schema, so views always bind
    warehouse.duckdb                         views over the Parquet files

Guarantees:

* **Crash-safe**: a part is written to a hidden temporary name and renamed
  when complete, so a query never sees half a file.
* **Idempotent**: a part's name is derived from the run and the batch, so a
  retried batch (or a re-run of the same run) overwrites rather than adds;
  the ``s3_objects`` view keeps one row per object (the latest).
* **Concurrent-safe**: runs never write to the DuckDB file (DuckDB allows
  one writer per database); each run writes its own files. The views are
  (re)created only when missing or out of date, by whoever gets there first.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from ingest.records import ManifestEntry

log = logging.getLogger(__name__)

_TS = pa.timestamp("us", tz="UTC")

SCHEMAS: dict[str, pa.Schema] = {
    "s3_objects": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("size", pa.int64()),
            ("last_modified", _TS),
            ("local_path", pa.string()),
            ("status", pa.string()),
            ("error", pa.string()),
            ("attempts", pa.int32()),
            ("seconds", pa.float64()),
            ("run_id", pa.string()),
            ("ingested_at", _TS),
        ]
    ),
    # Text extraction (ingest.extract): one part per run and download batch.
    "documents": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("kind", pa.string()),
            ("status", pa.string()),
            ("pages", pa.int32()),
            ("chars", pa.int64()),
            ("needs_ocr", pa.int32()),
            ("text", pa.string()),
            ("metadata", pa.string()),
            ("extractor", pa.string()),
            ("extractor_version", pa.string()),
            ("bytes", pa.int64()),
            ("seconds", pa.float64()),
            ("error", pa.string()),
            ("run_id", pa.string()),
            ("extracted_at", _TS),
        ]
    ),
    "task_timings": pa.schema(
        [
            ("flow_run_id", pa.string()),
            ("flow_name", pa.string()),
            ("task_run_id", pa.string()),
            ("task_name", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
            ("seconds", pa.float64()),
            ("items", pa.int64()),
            ("bytes", pa.int64()),
            ("attempts", pa.int32()),
            ("state", pa.string()),
            ("error", pa.string()),
        ]
    ),
    # One row per finished flow run (ingest.history): which deployment it belongs to, so a
    # run's summary can compare its stages with the previous run of the same deployment.
    "flow_runs": pa.schema(
        [
            ("flow_run_id", pa.string()),
            ("flow_name", pa.string()),
            ("deployment_id", pa.string()),
            ("parent_flow_run_id", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
            ("seconds", pa.float64()),
            ("items", pa.int64()),
            ("bytes", pa.int64()),
            ("failed", pa.int64()),
            ("state", pa.string()),
            ("message", pa.string()),
        ]
    ),
    # GitHub source (ingest.github): one part per run and repository.
    "pull_requests": pa.schema(
        [
            ("repo", pa.string()),
            ("number", pa.int64()),
            ("id", pa.int64()),
            ("title", pa.string()),
            ("state", pa.string()),
            ("draft", pa.bool_()),
            ("user_login", pa.string()),
            ("labels", pa.list_(pa.string())),
            ("created_at", _TS),
            ("updated_at", _TS),
            ("closed_at", _TS),
            ("merged_at", _TS),
            ("head_ref", pa.string()),
            ("base_ref", pa.string()),
            ("html_url", pa.string()),
            ("body", pa.string()),
            ("fetched_at", _TS),
            ("run_id", pa.string()),
        ]
    ),
    "api_requests": pa.schema(
        [
            ("run_id", pa.string()),
            ("repo", pa.string()),
            ("url", pa.string()),
            ("status", pa.int32()),
            ("seconds", pa.float64()),
            ("bytes", pa.int64()),
            ("from_cache", pa.bool_()),
            ("rate_remaining", pa.int64()),
            ("rate_limit", pa.int64()),
            ("rate_resource", pa.string()),
            ("attempt", pa.int32()),
            ("error", pa.string()),
            ("requested_at", _TS),
        ]
    ),
    "github_pages": pa.schema(
        [
            ("repo", pa.string()),
            ("state", pa.string()),
            ("per_page", pa.int32()),
            ("page", pa.int32()),
            ("url", pa.string()),
            ("etag", pa.string()),
            ("link", pa.string()),
            ("items", pa.int32()),
            ("newest_updated_at", _TS),
            ("oldest_updated_at", _TS),
            ("run_id", pa.string()),
            ("fetched_at", _TS),
        ]
    ),
    "github_syncs": pa.schema(
        [
            ("repo", pa.string()),
            ("state", pa.string()),
            ("per_page", pa.int32()),
            ("watermark", _TS),
            ("complete", pa.bool_()),
            ("stop_reason", pa.string()),
            ("pages", pa.int32()),
            ("requests", pa.int32()),
            ("not_modified", pa.int32()),
            ("items", pa.int64()),
            ("failed_pages", pa.int32()),
            ("run_id", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
        ]
    ),
}

# Views people query. ``{t}`` is replaced by the table's Parquet glob.
VIEWS: dict[str, str] = {
    "s3_object_log": "SELECT * FROM read_parquet({s3_objects}, union_by_name = true)",
    "s3_objects": """
        SELECT * FROM read_parquet({s3_objects}, union_by_name = true)
        QUALIFY row_number() OVER (PARTITION BY bucket, key ORDER BY ingested_at DESC) = 1""",
    "document_log": "SELECT * FROM read_parquet({documents}, union_by_name = true)",
    "documents": """
        SELECT * FROM read_parquet({documents}, union_by_name = true)
        QUALIFY row_number() OVER (PARTITION BY bucket, key ORDER BY extracted_at DESC) = 1""",
    "task_timings": "SELECT * FROM read_parquet({task_timings}, union_by_name = true)",
    "flow_runs": """
        SELECT * FROM read_parquet({flow_runs}, union_by_name = true)
        QUALIFY row_number() OVER (PARTITION BY flow_run_id ORDER BY ended_at DESC) = 1""",
    "pull_request_log": "SELECT * FROM read_parquet({pull_requests}, union_by_name = true)",
    "pull_requests": """
        SELECT * FROM read_parquet({pull_requests}, union_by_name = true)
        QUALIFY row_number() OVER (
            PARTITION BY repo, number ORDER BY updated_at DESC, fetched_at DESC) = 1""",
    "api_requests": "SELECT * FROM read_parquet({api_requests}, union_by_name = true)",
    "github_pages": """
        SELECT * FROM read_parquet({github_pages}, union_by_name = true)
        QUALIFY row_number() OVER (PARTITION BY repo, url ORDER BY fetched_at DESC) = 1""",
    "github_syncs": "SELECT * FROM read_parquet({github_syncs}, union_by_name = true)",
}
_VIEWS_VERSION = "1"


def table_dir(data_dir: Path, table: str) -> Path:
    return data_dir / "tables" / table


def table_glob(data_dir: Path, table: str) -> str:
    return str(table_dir(data_dir, table).resolve() / "**" / "*.parquet")


def write_part(
    data_dir: Path, table: str, run_id: str, part: str, rows: Sequence[Mapping[str, Any]]
) -> Path:
    """Write ``rows`` as one Parquet part, atomically. Returns the file's path."""
    schema = SCHEMAS[table]
    folder = table_dir(data_dir, table) / run_id
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{part}.parquet"
    tmp = folder / f".{part}.{uuid.uuid4().hex}.tmp"
    batch = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    try:
        pq.write_table(batch, tmp, compression="zstd")
        os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def ensure_tables(data_dir: Path) -> None:
    """Create each table folder with its zero-row schema file."""
    for table, schema in SCHEMAS.items():
        folder = table_dir(data_dir, table)
        marker = folder / "_schema.parquet"
        if not marker.exists():
            folder.mkdir(parents=True, exist_ok=True)
            tmp = folder / f"._schema.{uuid.uuid4().hex}.tmp"
            pq.write_table(schema.empty_table(), tmp)
            os.replace(tmp, marker)


def ensure_warehouse(data_dir: Path, *, wait_seconds: float = 5.0) -> bool:
    """Make ``warehouse.duckdb`` hold up-to-date views over the Parquet tables.

    Returns True when the views are current. Another process holding the
    database (a run, or someone in the ``duckdb`` CLI) is waited for a few
    seconds, then left alone: the Parquet files are the record, and the views
    will be refreshed by the next caller.
    """
    ensure_tables(data_dir)
    db = data_dir / "warehouse.duckdb"
    signature = json.dumps({"v": _VIEWS_VERSION, "root": str(data_dir.resolve()), "views": VIEWS})
    stamp = data_dir / ".warehouse-views"
    if db.exists() and stamp.exists() and stamp.read_text() == signature:
        return True
    globs = {t: _sql_str(table_glob(data_dir, t)) for t in SCHEMAS}
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with duckdb.connect(str(db)) as con:
                for name, body in VIEWS.items():
                    con.execute(f"CREATE OR REPLACE VIEW {name} AS {body.format(**globs)}")
            stamp.write_text(signature)
            return True
        except duckdb.IOException as exc:  # locked by another process
            if time.monotonic() > deadline:
                log.warning("warehouse.duckdb is busy, views not refreshed: %s", exc)
                return False
            time.sleep(0.2)


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def connect(data_dir: Path, *, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """Open the warehouse (creating the views first if needed)."""
    ensure_warehouse(data_dir)
    return duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=read_only)


def scan(data_dir: Path, table: str) -> str:
    """A ``read_parquet`` expression for ``table`` that needs no database file."""
    ensure_tables(data_dir)
    return f"read_parquet({_sql_str(table_glob(data_dir, table))}, union_by_name = true)"


def load_manifest(data_dir: Path, bucket: str, prefix: str) -> dict[str, ManifestEntry]:
    """Latest stored state of each key under ``bucket/prefix`` not marked deleted.

    Read straight from Parquet in an in-memory DuckDB, so it never waits on
    the warehouse file.
    """
    sql = f"""
        SELECT key, etag, size, local_path, status FROM {scan(data_dir, "s3_objects")}
        WHERE bucket = ? AND starts_with(key, ?)
        QUALIFY row_number() OVER (PARTITION BY key ORDER BY ingested_at DESC) = 1
    """
    with duckdb.connect() as con:
        rows = con.execute(sql, [bucket, prefix]).fetchall()
    return {
        key: ManifestEntry(etag=etag, size=size, local_path=path, status=status)
        for key, etag, size, path, status in rows
        if status != "deleted"
    }


def query(
    data_dir: Path, sql: str, params: Iterable[Any] | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run SQL over the warehouse views; returns column names and rows."""
    with connect(data_dir, read_only=True) as con:
        cur = con.execute(sql, list(params) if params else None)
        columns = [d[0] for d in cur.description or ()]
        return columns, cur.fetchall()
