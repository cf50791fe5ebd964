"""Commit a run's staged rows to the lake: one commit per table per run.

State tables are MERGEd (and their log tables appended with the same rows);
history tables are appended. Every step can be replayed after a crash without
duplicating a row:

* before a table's parts are committed, their names, grouped into slices of at
  most ``SLICE_ROWS`` rows (memory stays bounded however much a run changed),
  and a version number are written to ``<table>.commit`` in the run's staging
  folder, created only if absent (a conditional PUT on object storage, a hard
  link on a local disk): two processes committing the same run (its end and a
  recovery on another machine) agree on one manifest, so on one version;
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
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pyarrow as pa

from ingest import duck
from ingest.storage import evolve, lake, staging, warehouse
from ingest.storage.location import DataDir, files, locate
from ingest.storage.tables import (
    RESOURCE_SEPARATOR,
    SCHEMAS,
    SPECS,
    evolving,
    is_resource_table,
)

log = logging.getLogger(__name__)

# Rows per commit: a first run over a million objects commits in slices. Measured on
# a first-run commit of 1M rows: +277 MB peak at 100,000 rows, +233 MB at 50,000; with
# 128 requests in flight the whole first run peaked at 642 MB with 50,000 rows a slice
# (and 60,000 rows a MERGE, lake.MERGE_TARGET_ROWS), 583 MB with 25,000 (and 30,000),
# 491-512 MB once its MERGEs skipped the stored files outside each slice's keys (see
# lake.merge) and Arrow used the C library's allocator (see ingest/__init__.py).
SLICE_ROWS = 25_000
STALE_AFTER = 300.0  # seconds without a heartbeat before a run's staging counts as abandoned
# Commit order within a run: rows first, then what says they are stored (ETags, the sync
# watermark), so a crash between two commits costs a re-fetch, never a skipped row.
_FIRST = ("s3_objects", "documents", "pull_requests")
# The run's own records (staging.RECORDS: its freshness row, its flow-run row, its timings)
# mark nothing as stored: they commit last, side by side when small (every run's end; a
# no-op's only commits), not one after another.
_LAST = ("github_pages", "github_syncs", "rest_syncs", "api_windows", *staging.RECORDS)
# Tables of one rank commit side by side (their Delta logs are separate; the writer's
# Rust side releases the GIL) when their staged rows together are this few: a first
# GitHub run's child tables, requests, ETags and syncs, ~20-50 ms a commit each. More
# rows commit one table after another, so the commit's memory stays one slice's.
PARALLEL_ROWS = 5_000
PARALLEL_TABLES = 4


def _rank(table: str) -> tuple[int, int, str]:
    """(group, place in it, name); the groups commit in order."""
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


def commit_run(data_dir: DataDir, run_id: str, *, exclude: tuple[str, ...] = ()) -> CommitReport:
    """Commit every staged part of ``run_id`` (but the tables in ``exclude``), rows before
    the records that point at them."""
    started = time.perf_counter()
    release_free_memory()  # the run's downloads are done: their freed buffers go back first
    report = CommitReport()
    run_name = staging.safe_name(run_id)
    tables = sorted(
        (t for t in staging.staged_tables(data_dir, run_id) if t not in exclude), key=_rank
    )
    for group in sorted({_rank(t)[0] for t in tables}):
        members = [t for t in tables if _rank(t)[0] == group]
        for table, rows in _commit_group(data_dir, run_id, run_name, members):
            if rows:
                report.rows[table] = rows
    report.seconds = time.perf_counter() - started
    return report


def _commit_group(
    data_dir: DataDir, run_id: str, run_name: str, tables: list[str]
) -> list[tuple[str, int]]:
    """Commit tables of one rank: side by side when they are several and small
    (``PARALLEL_ROWS``), else in order. A table's commit replaces its child tables' rows
    (``replace_children``), so child tables (``a__b``) commit after their parents, level
    by level. Every commit of a level ends before the next starts; the first failure is
    raised then (the others' rows are committed, the failed one's staged)."""
    one = partial(_commit_table, data_dir, run_id, run_name)
    if len(tables) < 2 or _staged_rows(data_dir, run_id, tables) > PARALLEL_ROWS:
        return [(t, one(t)) for t in tables]
    done: list[tuple[str, int]] = []
    for depth in sorted({t.count(RESOURCE_SEPARATOR) for t in tables}):
        level = [t for t in tables if t.count(RESOURCE_SEPARATOR) == depth]
        with ThreadPoolExecutor(min(PARALLEL_TABLES, len(level)), "commit") as pool:
            futures = [(t, pool.submit(one, t)) for t in level]
        done += [(t, f.result()) for t, f in futures]
    return done


def _staged_rows(data_dir: DataDir, run_id: str, tables: list[str]) -> int:
    """Rows staged for ``tables`` (from the parts' footers), up to just past
    ``PARALLEL_ROWS``."""
    total = 0
    for table in tables:
        for key in staging.parts(data_dir, run_id, table):
            total += _part_rows(data_dir, key)
            if total > PARALLEL_ROWS:
                return total
    return total


def _part_rows(data_dir: DataDir, key: str) -> int:
    """Rows of a staged part; 0 for one that cannot be read (its commit sets it aside)."""
    try:
        return staging.part_rows(data_dir, key)
    except (OSError, pa.ArrowException):
        return 0


def _commit_table(data_dir: DataDir, run_id: str, run_name: str, table: str) -> int:
    lake_files = files(data_dir)
    folder = staging.run_key(run_name)
    manifest = f"{folder}/{table}.commit"
    pending = lake_files.get(manifest)
    if pending is None:
        keys = staging.parts(data_dir, run_id, table)
        if not keys:
            return 0
        plan: dict[str, Any] = {
            "version": time.time_ns() // 1000,
            "slices": _slices(data_dir, keys),
        }
        if not lake_files.create(manifest, json.dumps(plan).encode()):
            pending = lake_files.get(manifest)  # another process made it first: use theirs
    if pending is not None:  # a commit of these parts was interrupted, or runs elsewhere
        plan = json.loads(pending)
    version, slices = int(plan["version"]), [list(s) for s in plan["slices"]]
    committed = 0
    present = set(staging.parts(data_dir, run_id, table))
    for i, names in enumerate(slices):
        keys = [f"{folder}/{table}/{n}" for n in names if f"{folder}/{table}/{n}" in present]
        if keys:
            committed += _commit_slice(data_dir, run_name, table, keys, version + i)
            staging.remove_parts(data_dir, keys)
    lake_files.delete([manifest])
    return committed


def _slices(data_dir: DataDir, keys: list[str]) -> list[list[str]]:
    """Parts grouped into commits of at most ``SLICE_ROWS`` rows (one part may exceed it),
    so that a run that changed a million objects commits in bounded memory."""
    sized = [(key.rsplit("/", 1)[-1], _part_rows(data_dir, key)) for key in keys]
    return lake.packed(sized, SLICE_ROWS)


def _commit_slice(data_dir: DataDir, run_name: str, table: str, keys: list[str], txn: int) -> int:
    rows = staging.read_parts(data_dir, keys, table)
    spec = SPECS[table]
    resource = is_resource_table(table)
    said = evolve.directives(rows) if resource else {}
    dt = lake.open_table(data_dir, table) if spec.kind == "state" else None
    if evolving(table):
        stored = pa.schema(dt.schema().to_arrow()) if dt is not None else None
        rows = _evolve(data_dir, run_name, table, rows, txn, stored)
    if resource:
        rows = _deletions(data_dir, table, rows, said)
    if spec.kind == "state":
        # the table opened once for its schema and its MERGE (an opening reads its log);
        # a delete above changed it: the MERGE reads the log's new versions first
        lake.merge(data_dir, table, rows, dt=dt)
        # pull_requests too: its rows' key is their child rows' _root_key
        if resource or (spec.typed and "key" in rows.column_names):
            replace_children(data_dir, table, rows)
        if resource and said.get("disposition") == "replace" and said.get("complete"):
            _replace(data_dir, table, rows)
        if spec.log:
            lake.append(data_dir, spec.log, rows, txn=(_app_id(run_name, table), txn))
    else:
        lake.append(data_dir, table, rows, txn=(_app_id(run_name, table), txn))
    return rows.num_rows


def _evolve(
    data_dir: DataDir, run_name: str, table: str, rows: pa.Table, txn: int, stored: pa.Schema | None
) -> pa.Table:
    """A resource table's rows reconciled with its stored columns (``stored``: None for a
    table not written yet), the changes recorded in ``schema_history`` before the rows
    that bring them are committed."""
    base = SCHEMAS[table]
    rows, changes = evolve.reconcile(rows, stored if stored is not None else base, base)
    if changes and rows.num_rows:
        first = rows.slice(0, 1).to_pylist()[0]
        now = datetime.now(UTC)
        history = [
            {
                # pull_requests: the GitHub dialect's, whose rows name no source
                "source": first.get("source") or "github",
                "resource": first.get("resource") or table,
                "table_name": table,
                "column_name": c.column,
                "change": c.kind,
                "old_type": c.old_type,
                "new_type": c.new_type,
                "base_column": c.base or None,
                "run_id": first["run_id"],
                "changed_at": now,
            }
            for c in changes
        ]
        batch = pa.Table.from_pylist(history, schema=SCHEMAS["schema_history"])
        lake.append(
            data_dir, "schema_history", batch, txn=(_app_id(run_name, f"{table}:schema"), txn)
        )
    return rows


def _quoted(values: Any) -> str:
    return ", ".join(map(duck.sql_literal, values))


def _descendants(data_dir: DataDir, table: str) -> list[str]:
    """The stored child tables of ``table`` (its nested lists, at any depth)."""
    return [t for t in files(data_dir).children(lake.LAKE_DIR) if t.startswith(f"{table}__")]


def _delete(data_dir: DataDir, table: str, predicate: str) -> None:
    dt = lake.open_table(data_dir, table)
    if dt is not None:
        lake.with_commit_retries(lambda: dt.delete(predicate), table)


def _delete_keys(data_dir: DataDir, table: str, keys: set[str]) -> None:
    """Delete the rows of ``keys`` and their child rows."""
    if not keys:
        return
    listed = _quoted(sorted(keys))
    _delete(data_dir, table, f"key IN ({listed})")
    for child in _descendants(data_dir, table):
        _delete(data_dir, child, f"_root_key IN ({listed})")


def _deletions(data_dir: DataDir, table: str, rows: pa.Table, said: dict[str, Any]) -> pa.Table:
    """Rows a ``hard_delete`` column marks deleted: their stored rows (and child rows) go,
    and they are not stored. With a ``merge_key``, the stored rows (of other runs) that
    share a merge-key value with the rows go first (dlt's delete-insert)."""
    column = said.get("hard_delete")
    if column and column in rows.column_names and rows.num_rows:
        values = rows.column(column).to_pylist()
        gone = [v not in (None, False, 0, "", "false", "False", "0") for v in values]
        _delete_keys(
            data_dir,
            table,
            {k for k, g in zip(rows.column("key").to_pylist(), gone, strict=True) if g},
        )
        rows = rows.filter(pa.array([not g for g in gone]))
    merge_key = [c for c in said.get("merge_key") or [] if c in rows.column_names]
    if merge_key and rows.num_rows and lake.open_table(data_dir, table) is not None:
        relation = warehouse.table_sql(data_dir, table)
        same = " AND ".join(f't."{c}" = i."{c}"' for c in merge_key)
        runs = [r for r in set(rows.column("run_id").to_pylist()) if r]
        with locate(data_dir).connect() as con:
            con.register("incoming", rows.select(merge_key))
            stale = con.execute(
                f"SELECT t.key FROM ({relation}) t WHERE EXISTS "
                f"(SELECT 1 FROM incoming i WHERE {same}) AND t.run_id NOT IN (SELECT unnest(?))",
                [runs],
            ).fetchall()
        _delete_keys(data_dir, table, {k for (k,) in stale})
    return rows


def _replace(data_dir: DataDir, table: str, rows: pa.Table) -> None:
    """``write_disposition: replace`` after complete listings: the rows of other runs go,
    from the table and its child tables (an incomplete listing replaces nothing)."""
    runs = [r for r in set(rows.column("run_id").to_pylist()) if r]
    if not runs:
        return
    for name in (table, *_descendants(data_dir, table)):
        _delete(data_dir, name, f"run_id NOT IN ({_quoted(runs)})")


def replace_children(data_dir: DataDir, table: str, rows: pa.Table) -> None:
    """Delete the stored rows of ``table``'s child tables (its nested lists, at any depth)
    whose top-level record is among ``rows``, but those of the run that brought them: the
    run's own child rows, committed after their parents, then stand alone, and a line gone
    from an order is gone from its table. Replayed after the children were committed, it
    deletes nothing (the stored children are the run's)."""
    if not rows.num_rows:
        return
    keys = _quoted(set(rows.column("key").to_pylist()))
    runs = [r for r in set(rows.column("run_id").to_pylist()) if r]
    others = f" AND run_id NOT IN ({_quoted(runs)})" if runs else ""
    for child in _descendants(data_dir, table):
        _delete(data_dir, child, f"_root_key IN ({keys}){others}")


def recover(
    data_dir: DataDir, *, current_run: str = "", stale_after: float = STALE_AFTER
) -> list[str]:
    """Commit the staging of runs that died; returns their run names.

    A run is dead when its heartbeat is older than ``stale_after`` seconds (or, on a
    local lake, names a process of this host that is gone). Two processes recovering
    at once, on one machine or two, are safe: a mark created only if absent keeps the
    second away, and every commit step is idempotent anyway.
    """
    SPECS.loaded()  # before marking any run: its tables must all be known
    recovered: list[str] = []
    current = staging.safe_name(current_run) if current_run else ""
    lake_files = files(data_dir)
    for name in staging.runs(data_dir):
        if name == current:
            continue
        if staging.heartbeat_age(data_dir, name) < stale_after and not staging.owner_gone(
            data_dir, name
        ):
            continue
        mark = f"{staging.run_key(name)}/.recovering"
        if not lake_files.create(mark, str(time.time()).encode()):
            since = lake_files.mtime(mark)
            if since is not None and time.time() - since >= stale_after:
                lake_files.delete([mark])  # its recoverer died too: the next run retries
            continue  # another process is recovering it
        log.warning("committing the staged rows of run %s, which ended without committing", name)
        commit_run(data_dir, name)
        staging.remove_run(data_dir, name)
        recovered.append(name)
    return recovered
