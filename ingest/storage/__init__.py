"""Storage: Delta Lake tables under ``data_dir/lake``, DuckDB over them.

Layout under ``data_dir``::

    lake/<table>/                  Delta tables (``_delta_log`` + Parquet files)
    staging/<run_id>/<table>/      a running run's rows, committed at its end
    warehouse.duckdb               views over the tables, for the ``duckdb`` CLI

Modules, one concern each: ``tables`` (schemas and kinds), ``lake`` (append,
merge), ``staging`` (a run's parts and heartbeat), ``commit`` (staging to lake,
recovery of dead runs), ``warehouse`` (DuckDB views, queries), ``maintenance``
(retention, compaction, vacuum), ``migrate`` (the old layout).
"""

from __future__ import annotations

from pathlib import Path

from ingest.storage import staging
from ingest.storage.commit import CommitReport, commit_run, recover
from ingest.storage.lake import append, data_files, merge, open_table
from ingest.storage.maintenance import MaintenanceReport, maintain, sweep_temporary
from ingest.storage.migrate import migrate, needs_migration
from ingest.storage.staging import heartbeat, stage
from ingest.storage.tables import SCHEMAS, SPECS
from ingest.storage.warehouse import connect, query, refresh_warehouse, scan

__all__ = [
    "SCHEMAS",
    "SPECS",
    "CommitReport",
    "MaintenanceReport",
    "append",
    "commit_run",
    "connect",
    "data_files",
    "finish_run",
    "heartbeat",
    "maintain",
    "merge",
    "migrate",
    "needs_migration",
    "open_table",
    "prepare",
    "query",
    "recover",
    "refresh_warehouse",
    "scan",
    "stage",
    "sweep_temporary",
]


def finish_run(data_dir: Path, run_id: str) -> None:
    """Commit what the run still has staged (a run that failed part-way), then remove its
    staging folder. If the commit itself fails, the folder stays for the next run."""
    committed = commit_run(data_dir, run_id).rows  # a successful run has committed already
    if committed:
        refresh_warehouse(data_dir, tables=committed)
    staging.remove_run(data_dir, staging.safe_name(run_id))


def prepare(data_dir: Path, *, current_run: str = "", stale_after: float = 300.0) -> list[str]:
    """Before a run: migrate an old data folder once, and commit what dead runs staged.

    Returns the names of the runs recovered.
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    if needs_migration(data_dir):
        migrate(data_dir)
    recovered = recover(data_dir, current_run=current_run, stale_after=stale_after)
    if recovered:  # their tables may be ones this run does not write
        refresh_warehouse(data_dir)
    # Parts a live run was writing when it was killed, in folders recovery left in place.
    sweep_temporary(data_dir / staging.STAGING_DIR)
    return recovered
