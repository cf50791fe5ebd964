"""Storage: Delta Lake tables under ``data_dir/lake``, DuckDB over them.

``data_dir`` is a local folder or ``s3://bucket/prefix`` (``locate``: one
``LakeLocation`` yields the URIs, delta-rs options and file operations). Layout
under it::

    lake/<table>/                  Delta tables (``_delta_log`` + Parquet files)
    staging/<run_id>/<table>/      a running run's rows, committed at its end
    staging/_leases/               which live run ingests which target (``leases``)
    warehouse.duckdb               views over the tables, for the ``duckdb`` CLI
                                   (in local_dir when the lake is on object storage)

Modules, one concern each: ``tables`` (the kinds of table and the catalog that
``ingest.catalog.load`` fills with every source's tables), ``lake`` (append,
merge), ``staging`` (a run's parts and heartbeat), ``commit`` (staging to lake,
recovery of dead runs), ``warehouse`` (DuckDB views, queries), ``maintenance``
(retention, compaction, vacuum), ``migrate`` (the old layout), ``leases`` (one run
per target).
"""

from __future__ import annotations

from pathlib import Path

from ingest.storage import location, staging
from ingest.storage.commit import CommitReport, commit_run, recover
from ingest.storage.lake import data_files, open_table
from ingest.storage.location import DataDir, LakeLocation, locate
from ingest.storage.maintenance import MaintenanceReport, maintain, sweep_temporary
from ingest.storage.migrate import migrate, needs_migration
from ingest.storage.staging import heartbeat, stage
from ingest.storage.tables import SCHEMAS
from ingest.storage.warehouse import (
    ReadOnlyQueryError,
    connect,
    query,
    query_read_only,
    refresh_warehouse,
    scan,
    snapshot_warehouse,
)

__all__ = [
    "SCHEMAS",
    "CommitReport",
    "LakeLocation",
    "MaintenanceReport",
    "ReadOnlyQueryError",
    "commit_run",
    "connect",
    "data_files",
    "finish_run",
    "heartbeat",
    "locate",
    "maintain",
    "open_table",
    "prepare",
    "query",
    "query_read_only",
    "recover",
    "refresh_warehouse",
    "scan",
    "snapshot_warehouse",
    "stage",
]


def finish_run(data_dir: DataDir, run_id: str) -> None:
    """Commit what the run still has staged (a run that failed part-way), then remove its
    staging folder. If the commit itself fails, the folder stays for the next run."""
    committed = commit_run(data_dir, run_id).rows  # a successful run has committed already
    if committed:
        refresh_warehouse(data_dir, tables=committed)
    staging.remove_run(data_dir, staging.safe_name(run_id))


def prepare(data_dir: DataDir, *, current_run: str = "", stale_after: float = 300.0) -> list[str]:
    """Before a run: check the lake can be reached, migrate an old data folder once, and
    commit what dead runs staged.

    Returns the names of the runs recovered.
    """
    loc = locate(data_dir)
    location.check(loc)  # an s3:// lake: endpoint, credentials and bucket, or a clear error
    loc.local_dir.mkdir(parents=True, exist_ok=True)
    if needs_migration(loc):
        migrate(Path(loc.root))
    recovered = recover(loc, current_run=current_run, stale_after=stale_after)
    if recovered:  # their tables may be ones this run does not write
        refresh_warehouse(loc)
    # Parts a live run was writing when it was killed, in folders recovery left in place.
    sweep_temporary(loc, staging.STAGING_DIR)
    return recovered
