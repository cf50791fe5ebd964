"""Commit a run's staged rows to the lake: one commit per table per run.

State tables are MERGEd (and their log tables appended with the same rows);
history tables are appended. Every step can be replayed after a crash without
duplicating a row:

* before a table's parts are committed, their names, grouped into slices of at
  most ``SLICE_ROWS`` rows (memory stays bounded however much a run changed),
  and a version number are written to ``<table>.commit`` in the run's staging
  folder;
* an append carries that version (plus the slice's index) as a Delta app
  transaction (``ingest:<run>:<table>``), so the replay of an append that
  already committed is skipped;
* a MERGE replaces a row only with a newer one, so replaying it writes nothing;
* the committed parts and the ``.commit`` file are removed last.

``recover`` commits what dead runs left behind (a run killed half-way), so the
objects it fetched are not fetched again and none of its rows is lost.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.storage import durable, lake, staging
from ingest.storage.tables import SPECS

log = logging.getLogger(__name__)

# Rows per commit: a first run over a million objects commits in slices. Measured on
# a first-run commit of 1M rows: +277 MB peak at 100,000 rows, +233 MB at 50,000.
SLICE_ROWS = 50_000
STALE_AFTER = 300.0  # seconds without a heartbeat before a run's staging counts as abandoned
# Commit order within a run: rows first, then what says they are stored (ETags, the sync
# watermark), so a crash between two commits costs a re-fetch, never a skipped row.
_FIRST = ("s3_objects", "documents", "pull_requests")
_LAST = ("github_pages", "github_syncs", "rest_syncs", "api_windows", "flow_runs", "task_timings")


def _rank(table: str) -> tuple[int, int, str]:
    if table in _FIRST:
        return (0, _FIRST.index(table), table)
    if table in _LAST:
        return (2, _LAST.index(table), table)
    return (1, 0, table)


@dataclass(slots=True)
class CommitReport:
    """Rows committed per table by one ``commit_run``."""

    rows: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    warehouse_refreshed: bool = True  # False: warehouse.duckdb was held by another process


def release_free_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's ``malloc_trim``; a no-op
    elsewhere). After thousands of batches on dozens of threads, glibc keeps their freed
    buffers in per-thread arenas; the commit's peak then comes on top of them."""
    with suppress(OSError, AttributeError):
        ctypes.CDLL(None).malloc_trim(0)


def _app_id(run_name: str, table: str) -> str:
    return f"ingest:{run_name}:{table}"


def commit_run(data_dir: Path, run_id: str, *, exclude: tuple[str, ...] = ()) -> CommitReport:
    """Commit every staged part of ``run_id`` (but the tables in ``exclude``), rows before
    the records that point at them."""
    started = time.perf_counter()
    release_free_memory()  # the run's downloads are done: their freed buffers go back first
    report = CommitReport()
    run_name = staging.safe_name(run_id)
    tables = sorted(
        (t for t in staging.staged_tables(data_dir, run_id) if t not in exclude), key=_rank
    )
    for table in tables:
        rows = _commit_table(data_dir, run_id, run_name, table)
        if rows:
            report.rows[table] = rows
    report.seconds = time.perf_counter() - started
    return report


def _commit_table(data_dir: Path, run_id: str, run_name: str, table: str) -> int:
    folder = staging.run_dir(data_dir, run_id)
    manifest = folder / f"{table}.commit"
    if manifest.exists():  # a commit of these parts was interrupted: replay it
        pending = json.loads(manifest.read_text())
        version, slices = int(pending["version"]), [list(s) for s in pending["slices"]]
    else:
        paths = staging.parts(data_dir, run_id, table)
        if not paths:
            return 0
        version = time.time_ns() // 1000
        slices = _slices(paths)
        tmp = manifest.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": version, "slices": slices}))
        durable.replace(tmp, manifest)
    committed = 0
    for i, names in enumerate(slices):
        paths = [folder / table / n for n in names if (folder / table / n).exists()]
        if paths:
            committed += _commit_slice(data_dir, run_name, table, paths, version + i)
            staging.remove_parts(paths)
    manifest.unlink(missing_ok=True)
    return committed


def _slices(paths: list[Path]) -> list[list[str]]:
    """Parts grouped into commits of at most ``SLICE_ROWS`` rows (one part may exceed it),
    so that a run that changed a million objects commits in bounded memory."""
    slices: list[list[str]] = [[]]
    rows = 0
    for path in paths:
        try:
            n = pq.read_metadata(path).num_rows
        except (OSError, pa.ArrowException):
            n = 0  # unreadable: read_parts sets it aside
        if slices[-1] and rows + n > SLICE_ROWS:
            slices.append([])
            rows = 0
        slices[-1].append(path.name)
        rows += n
    return slices


def _commit_slice(data_dir: Path, run_name: str, table: str, paths: list[Path], txn: int) -> int:
    rows = staging.read_parts(paths, table)
    spec = SPECS[table]
    if spec.kind == "state":
        lake.merge(data_dir, table, rows)
        if spec.log:
            lake.append(data_dir, spec.log, rows, txn=(_app_id(run_name, table), txn))
    else:
        lake.append(data_dir, table, rows, txn=(_app_id(run_name, table), txn))
    return rows.num_rows


def recover(
    data_dir: Path, *, current_run: str = "", stale_after: float = STALE_AFTER
) -> list[str]:
    """Commit the staging of runs that died; returns their run names.

    A run is dead when its heartbeat is older than ``stale_after`` seconds, or
    names a process of this host that is gone. Two
    runs recovering at once are safe: a lock file keeps the second away, and
    every commit step is idempotent anyway.
    """
    recovered: list[str] = []
    current = staging.safe_name(current_run) if current_run else ""
    for name in staging.runs(data_dir):
        if name == current:
            continue
        if staging.heartbeat_age(data_dir, name) < stale_after and not staging.owner_gone(
            data_dir, name
        ):
            continue
        folder = data_dir / staging.STAGING_DIR / name
        lock = folder / ".recovering"
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            if time.time() - lock.stat().st_mtime < stale_after:
                continue  # another run is recovering it
            lock.unlink(missing_ok=True)
            continue
        except FileNotFoundError:
            continue
        os.close(fd)
        log.warning("committing the staged rows of run %s, which ended without committing", name)
        commit_run(data_dir, name)
        staging.remove_run(data_dir, name)
        recovered.append(name)
    return recovered
