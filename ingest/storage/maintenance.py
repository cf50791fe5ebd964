"""Keep the lake small and fast after years of nights: retention, compaction, vacuum.

Run by the nightly flows after their commit (``maintain``), and by hand with
``ingest maintain``:

* **retention**: history tables drop the ``day`` partitions older than
  ``retention_days`` (a metadata-only delete of whole files);
* **compaction**: a table with more than ``compact_min_files`` files is
  rewritten into few large ones (history tables per day partition; state tables
  ordered by their keys, so a key-range read touches few files);
* **checkpoints**: every ``CHECKPOINT_EVERY`` commits, so that log entries past
  the table's log retention (a week) are dropped;
* **vacuum**: files that left the table more than ``vacuum_retention_hours``
  ago are deleted, with expired log entries; younger ones stay so that readers
  of an older version (a view in ``warehouse.duckdb``, time travel) keep working.
  It runs in full mode, so a data file a killed writer left outside the log is
  deleted too once it is that old;
* **sweep**: temporary files a killed writer left in a table's folder or log
  (``*.tmp``, the object store's ``<name>#<n>`` upload files, delta-rs's
  ``_commit_<uuid>.json.tmp``) and in the staging area are deleted once older
  than ``SWEEP_AFTER``; younger ones may belong to a writer still at work. A
  vacuum skips them (hidden or not Parquet), so nothing else ever would. The
  age is the file's modification time (an object's LastModified on S3), never
  a process id: on a shared lake the writer may be on another machine.

A run asks first which of its tables are due (``due``): each table ``maintain`` went
over is recorded with its version and the time (``staging/_maintenance.json``), and it
is due again after ``CHECKPOINT_EVERY`` commits or ``MAINTAIN_EVERY`` seconds, found by
one listing of its log. A run with nothing new then opens no table for its upkeep
(opening one reads its log: ~20 ms, and the vacuum lists all its files).
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from functools import partial

from deltalake import DeltaTable

from ingest.storage import lake
from ingest.storage.location import DataDir, files, locate
from ingest.storage.staging import STAGING_DIR
from ingest.storage.tables import SPECS
from ingest.storage.warehouse import refresh_warehouse

log = logging.getLogger(__name__)

SWEEP_AFTER = 3600.0  # seconds: a temporary file this old belongs to a writer that died
# A table's upkeep is due again after this long (or CHECKPOINT_EVERY commits): what a
# maintenance changes moves no faster (the sweep's age; retention by the day, vacuum past
# vacuum_retention_hours), and compaction waits at most that many commits.
MAINTAIN_EVERY = SWEEP_AFTER
# Which version of each table ``maintain`` went over last, and when.
RECORD = f"{STAGING_DIR}/_maintenance.json"
_COMMIT_FILE = re.compile(r"^(\d{20})\.json$")
# Temporary names: ours and delta-rs's (``*.tmp``), the object store's upload files (``#n``).
_TEMPORARY = re.compile(r"(\.tmp|#\d+)$")


@dataclass(slots=True)
class MaintenanceReport:
    """What ``maintain`` did, per table."""

    expired_files: dict[str, int] = field(default_factory=dict)
    compacted: dict[str, tuple[int, int]] = field(default_factory=dict)  # files removed, added
    vacuumed: dict[str, int] = field(default_factory=dict)
    swept: dict[str, int] = field(default_factory=dict)  # temporary files left by dead writers

    @property
    def changed(self) -> int:
        return (
            sum(self.expired_files.values())
            + sum(r for r, _ in self.compacted.values())
            + sum(self.vacuumed.values())
            + sum(self.swept.values())
        )


def maintain(
    data_dir: DataDir,
    *,
    retention_days: int,
    compact_min_files: int,
    vacuum_retention_hours: int,
    today: date | None = None,
    tables: list[str] | None = None,
) -> MaintenanceReport:
    """Apply retention, compact tables past the file threshold, vacuum."""
    report = MaintenanceReport()
    maintained: dict[str, int] = {}
    today = today or datetime.now(UTC).date()
    for table in tables or list(lake.tables_present(data_dir)):
        spec = SPECS[table]
        dt = lake.open_table(data_dir, table)
        if dt is None:
            continue
        if spec.kind == "history" and retention_days > 0:
            cutoff = today - timedelta(days=retention_days)
            metrics = lake.with_commit_retries(partial(_delete_before, dt, cutoff), table)
            if metrics:
                report.expired_files[table] = metrics
        files = len(dt.file_uris())
        if files > compact_min_files:
            if spec.kind == "state" and spec.sort:
                metrics_c = dt.optimize.z_order(list(spec.sort), target_size=lake.TARGET_FILE_SIZE)
            else:
                metrics_c = dt.optimize.compact(target_size=lake.TARGET_FILE_SIZE)
            report.compacted[table] = (
                int(metrics_c.get("numFilesRemoved", 0)),
                int(metrics_c.get("numFilesAdded", 0)),
            )
        _checkpoint(dt, data_dir, _log_dir(table))
        removed = dt.vacuum(
            retention_hours=vacuum_retention_hours,
            dry_run=False,
            enforce_retention_duration=False,
            # Files outside the log too, but only past the sweep's age: a younger one may be
            # a concurrent writer's file that its commit is about to add.
            full=vacuum_retention_hours * 3600 >= SWEEP_AFTER,
        )
        if removed:
            report.vacuumed[table] = len(removed)
        dt.cleanup_metadata()
        swept = sweep_temporary(data_dir, f"{lake.LAKE_DIR}/{table}")
        if swept:
            report.swept[table] = swept
        maintained[table] = dt.version()
    rewritten = set(report.expired_files) | set(report.compacted)
    if rewritten:  # their views must list the new files before vacuum takes the old ones
        refresh_warehouse(data_dir, tables=rewritten)
    _remember(data_dir, maintained)
    return report


def due(data_dir: DataDir, tables: list[str], *, now: float | None = None) -> list[str]:
    """The tables of ``tables`` whose upkeep is due: present, and not gone over by
    ``maintain`` (``RECORD``) within ``CHECKPOINT_EVERY`` commits and ``MAINTAIN_EVERY``
    seconds. One listing of each table's log, no table opened."""
    now = time.time() if now is None else now
    record = _record(data_dir)
    found = []
    for table in tables:
        version = newest_version(data_dir, table)
        if version is None:
            continue  # never written: nothing to keep
        last = record.get(table)
        if (
            not isinstance(last, dict)
            or version - int(last.get("version", -1)) >= lake.CHECKPOINT_EVERY
            or not 0 <= now - float(last.get("at", 0)) < MAINTAIN_EVERY
        ):
            found.append(table)
    return found


def newest_version(data_dir: DataDir, table: str) -> int | None:
    """The table's newest version by the names in its log; None without one."""
    names = (e.key.rsplit("/", 1)[-1] for e in files(data_dir).entries(_log_dir(table)))
    versions = [int(m.group(1)) for n in names if (m := _COMMIT_FILE.match(n))]
    return max(versions, default=None)


def _log_dir(table: str) -> str:
    return f"{lake.LAKE_DIR}/{table}/_delta_log"


def _record(data_dir: DataDir) -> dict[str, object]:
    raw = files(data_dir).get(RECORD)
    try:
        record = json.loads(raw) if raw else {}
    except ValueError:
        return {}  # torn by hand: every table is due once
    return record if isinstance(record, dict) else {}


def _remember(data_dir: DataDir, maintained: dict[str, int]) -> None:
    """Record the tables just maintained (a run at the same moment may lose its entry to
    this one's: that table is then only due again sooner)."""
    if not maintained:
        return
    record = _record(data_dir)
    now = time.time()
    record.update({t: {"version": v, "at": now} for t, v in maintained.items()})
    files(data_dir).put(RECORD, json.dumps(record, sort_keys=True).encode())


def sweep_temporary(data_dir: DataDir, prefix: str, *, older_than: float = SWEEP_AFTER) -> int:
    """Delete the temporary files under ``prefix`` of the lake older than ``older_than``
    seconds; returns how many. Only temporary names are touched: never a data file or a
    log entry."""
    lake_files = files(data_dir)
    cutoff = time.time() - older_than
    old = [
        e.key
        for e in lake_files.entries(prefix)
        if _TEMPORARY.search(e.key.rsplit("/", 1)[-1]) and e.mtime < cutoff
    ]
    lake_files.delete(old)  # a file its writer finished meanwhile is simply gone already
    if old:
        log.info(
            "%s: removed %d temporary files left by writers that died",
            locate(data_dir).uri(prefix),
            len(old),
        )
    return len(old)


def _delete_before(dt: DeltaTable, cutoff: date) -> int:
    dt.update_incremental()
    metrics = dt.delete(f"day < '{cutoff.isoformat()}'")
    return int(metrics.get("num_removed_files", 0))


def _checkpoint(dt: DeltaTable, data_dir: DataDir, log_dir: str) -> None:
    """Write a checkpoint when the log has grown by ``CHECKPOINT_EVERY`` commits since the
    last one, so readers replay few log files and ``cleanup_metadata`` can drop old ones."""
    dt.update_incremental()
    checkpoints = sorted(
        e.key.rsplit("/", 1)[-1]
        for e in files(data_dir).entries(log_dir)
        if e.key.endswith(".checkpoint.parquet")
    )
    last = int(checkpoints[-1].split(".")[0]) if checkpoints else -1
    if dt.version() - last >= lake.CHECKPOINT_EVERY:
        dt.create_checkpoint()
