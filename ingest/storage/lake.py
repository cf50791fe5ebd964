"""Delta Lake tables under ``<data_dir>/lake/<table>``, through delta-rs (``deltalake``).

Why a table format rather than a folder of Parquet files: the table's log, not
a folder glob, decides which files exist, so a crashed writer's half file or a
stray file is never read; every write is one atomic commit; state tables are
MERGEd in place (a night with nothing new writes nothing); history tables are
partitioned by day, trimmed, compacted and vacuumed; and the same code works on
a local disk and on object storage.

Small named operations, one per need: ``open_table``, ``append``, ``merge``,
``data_files``. Each write retries a commit that lost a race against another
writer (two runs committing at once), so concurrent runs never block or
corrupt each other.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, DeltaError, TableNotFoundError

from ingest import duck
from ingest.backoff import Backoff
from ingest.storage.location import DataDir, files, locate
from ingest.storage.tables import SPECS, TableSpec, evolving, is_resource_table

log = logging.getLogger(__name__)

LAKE_DIR = "lake"
COMMIT_ATTEMPTS = 8  # a commit that lost a race is redone (with jitter) up to this often
# 0.05-0.4 s after the first lost race, doubling: writers that collided spread out.
COMMIT_BACKOFF = Backoff(max_attempts=COMMIT_ATTEMPTS, base=0.4, cap=15.0, jitter=0.875)
TARGET_FILE_SIZE = 32 * 1024 * 1024  # compaction's file size: small enough to MERGE cheaply
CHECKPOINT_EVERY = 10  # commits between two checkpoints written by maintenance
# Stored rows one MERGE of a partitioned state table reads at most (whole parts, less
# the files outside the source's key range; see part_groups): with 16 parts, a table of
# up to this many rows takes one commit per run, not sixteen (halved from 60,000 with
# commit.SLICE_ROWS: a first run's commit peak, see there).
MERGE_TARGET_ROWS = 30_000
# Log entries older than a week are dropped after a checkpoint (Delta's default keeps 30
# days), so a table's log stays a few dozen files whatever its age; time travel reaches
# back as far as vacuum keeps files (vacuum_retention_hours, a week by default).
TABLE_CONFIG = {"delta.logRetentionDuration": "interval 7 days"}

T = TypeVar("T")


def table_path(data_dir: Path, table: str) -> Path:
    """The folder of a table of a local lake."""
    return data_dir / LAKE_DIR / table


def table_uri(data_dir: DataDir, table: str) -> str:
    """The table's URI: a local folder, or ``s3://bucket/prefix/lake/<table>``."""
    return locate(data_dir).uri(LAKE_DIR, table)


def open_table(data_dir: DataDir, table: str) -> DeltaTable | None:
    """The table's current version, or None when nothing was ever written to it."""
    loc = locate(data_dir)
    if not loc.remote and not (Path(table_uri(loc, table)) / "_delta_log").is_dir():
        return None  # a cheap look first: most tables of a local lake are opened often
    try:
        return DeltaTable(table_uri(loc, table), storage_options=loc.storage_options() or None)
    except TableNotFoundError:
        return None


def ensure_table(data_dir: DataDir, table: str) -> DeltaTable:
    """Open the table, creating it empty (schema, partitioning) when missing."""
    dt = open_table(data_dir, table)
    if dt is not None:
        return dt
    spec = SPECS[table]
    loc = locate(data_dir)
    if not loc.remote:
        Path(table_uri(loc, table)).mkdir(parents=True, exist_ok=True)
    try:
        return DeltaTable.create(
            table_uri(loc, table),
            schema=spec.schema,
            partition_by=spec.partition_by,
            mode="ignore",  # another process may create it at the same moment
            name=table,
            configuration=TABLE_CONFIG,
            storage_options=loc.storage_options() or None,
        )
    except DeltaError:
        dt = open_table(data_dir, table)
        if dt is None:
            raise
        return dt


def create_with(
    data_dir: DataDir, table: str, data: pa.Table, *, txn: tuple[str, int] | None = None
) -> bool:
    """Create the missing table holding ``data`` (conformed to its schema) in one commit,
    instead of an empty table and then a write: a first run's commit of a history table is
    one Delta commit, not two. For appends only: two writers creating the table at once may
    both succeed (delta-rs commits the second as an append of the next version), which is
    what an append means, and never what a MERGE of a state table may do.

    Returns False when the table exists already; the caller then writes as usual.
    """
    spec = SPECS[table]
    loc = locate(data_dir)
    try:
        write_deltalake(
            table_uri(loc, table),
            data,
            mode="error",  # not when a table is there (a concurrent creator may still win)
            partition_by=spec.partition_by,
            name=table,
            configuration=TABLE_CONFIG,
            storage_options=loc.storage_options() or None,
            commit_properties=_commit_properties(txn),
        )
    except DeltaError:
        if open_table(loc, table) is None:
            raise  # not a lost race: a real failure
        return False
    return True


# Files a reader may skip: (column, op, value) filters, all of which a wanted row meets.
Prune = list[tuple[str, str, Any]]


def data_files(data_dir: DataDir, table: str, prune: Prune | None = None) -> list[str]:
    """The Parquet files of the table's current version (what a reader must read); with
    ``prune``, only those whose partition values and column statistics may hold a row
    meeting every filter (a superset of the files holding such rows: exact on
    partition columns, by min/max elsewhere)."""
    dt = open_table(data_dir, table)
    return [] if dt is None else files_of(dt, prune)


def files_of(dt: DeltaTable, prune: Prune | None = None) -> list[str]:
    """``data_files`` of a table already open."""
    uris = dt.file_uris(file_pruning_predicate=prune) if prune else dt.file_uris()
    # delta-rs gives local files as percent-encoded paths ("My%20Data/..."): DuckDB and the
    # file system want the path itself.
    return [unquote(u) if "://" not in u else u for u in uris]


def conform(spec: TableSpec, rows: pa.Table) -> pa.Table:
    """Cast ``rows`` to the table's schema: missing columns become nulls, extra ones go,
    and a history table gets its ``day`` from its timestamp column."""
    if is_resource_table(spec.name):  # typed columns beside the fixed ones: see evolve
        return rows
    schema = spec.schema
    extra = [n for n in rows.column_names if n not in schema.names] if evolving(spec.name) else []
    columns = []
    for field in schema:
        if field.name == "day" and spec.kind == "history":
            ts = rows.column(spec.day_from) if spec.day_from in rows.column_names else None
            columns.append(
                pc.cast(ts, pa.date32()) if ts is not None else pa.nulls(rows.num_rows, pa.date32())
            )
        elif field.name == "part" and spec.parts:
            columns.append(part_of(rows.column(spec.keys[-1]), spec.parts))
        elif field.name in rows.column_names:
            columns.append(rows.column(field.name).cast(field.type))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    fixed = pa.Table.from_arrays(columns, schema=schema)
    for name in extra:  # pull_requests' typed columns, after its fixed ones
        fixed = fixed.append_column(name, rows.column(name))
    return fixed


def part_of(keys: pa.ChunkedArray | pa.Array, parts: int) -> pa.Array:
    """The ``part`` of each key: CRC-32 of its UTF-8 bytes modulo ``parts`` (stable across
    processes and versions, unlike Python's or DuckDB's hash)."""
    return pa.array([zlib.crc32(k.encode()) % parts for k in keys.to_pylist()], pa.int32())


def append(
    data_dir: DataDir, table: str, rows: pa.Table, *, txn: tuple[str, int] | None = None
) -> bool:
    """Append ``rows`` in one commit. Returns False when nothing was written.

    ``txn`` = (app id, version) makes the append idempotent across retries and
    crashes: Delta records it in the same commit, and an append whose version
    the table already holds is skipped (Delta's idempotent-writes mechanism).
    """
    spec = SPECS[table]
    if rows.num_rows == 0:
        return False
    data = conform(spec, rows)
    dt = open_table(data_dir, table)
    if dt is None:
        if create_with(data_dir, table, data, txn=txn):
            return True
        dt = ensure_table(data_dir, table)

    def write() -> bool:
        dt.update_incremental()
        if txn is not None:
            done = dt.transaction_version(txn[0])
            if done is not None and done >= txn[1]:
                return False
        write_deltalake(
            dt,
            data,
            mode="append",
            partition_by=spec.partition_by,
            schema_mode="merge",  # a table made before a column was added gains it
            commit_properties=_commit_properties(txn),
        )
        return True

    return with_commit_retries(write, table)


def merge(
    data_dir: DataDir, table: str, rows: pa.Table, *, dt: DeltaTable | None = None
) -> dict[str, int]:
    """Upsert ``rows`` into a state table by its keys: one commit, or one per ``part``
    of a partitioned table (each MERGE then reads and rewrites that part only).

    The newest row per key wins within ``rows``; a stored row is replaced only
    by a strictly newer one (``spec.newer``), so replaying the same rows is a
    no-op that writes no version and no file. Returns delta-rs's merge metrics,
    added up. ``dt``: the table, when the caller has opened it (each opening reads its
    log).
    """
    spec = SPECS[table]
    if rows.num_rows == 0:
        return {}
    data = latest_per_key(spec, conform(spec, rows))
    # Not created holding these rows (``create_with``), as an append is: when two runs
    # create the table at once, delta-rs commits the loser's creation again as an append
    # of the next version (appends do not conflict), and a state table would hold every
    # key twice. An empty table first, then the MERGE, which does conflict.
    dt = dt if dt is not None else ensure_table(data_dir, table)  # dt: opened by the caller
    resource = evolving(table)
    if fill_empty(dt, table, data, merge_schema=resource):
        return {"num_target_rows_inserted": data.num_rows}
    on = " AND ".join(f"t.{k} = s.{k}" for k in spec.keys)
    newer = f"s.{spec.newer} > t.{spec.newer} OR t.{spec.newer} IS NULL"
    groups: list[tuple[str, pa.Table]] = [(on, data)]
    if spec.parts:
        column = data.column("part")
        # t.part = s.part (true of any matching pair) makes delta-rs prune by each part's
        # own key range, the ranges part_groups counts with.
        groups = [
            (
                f"t.part IN ({', '.join(map(str, parts))}) AND t.part = s.part AND {on}",
                data.filter(pc.is_in(column, pa.array(parts, column.type))),
            )
            for parts in part_groups(dt, data, spec.keys[-1])
        ]
    totals: dict[str, int] = {}
    for predicate, source in groups:
        # streamed_exec=False: the source (at most a commit slice) is in memory anyway, and
        # only then does delta-rs prune target files by the source's key range (min/max
        # statistics). Streamed, every MERGE read the whole part: a first run over 1M
        # objects, committed in listing order, read 19.5M stored rows in 40 slices; now
        # none (1M-row commit 47 s -> 37 s).
        def write(predicate: str = predicate, source: pa.Table = source) -> dict[str, int]:
            dt.update_incremental()
            return dict(
                dt.merge(
                    source,
                    predicate,
                    source_alias="s",
                    target_alias="t",
                    streamed_exec=False,
                    merge_schema=resource,  # a new typed column is added
                )
                .when_matched_update_all(predicate=newer)
                .when_not_matched_insert_all()
                .execute()
            )

        for key, value in with_commit_retries(write, table).items():
            if isinstance(value, int):
                totals[key] = totals.get(key, 0) + value
    return totals


def fill_empty(dt: DeltaTable, table: str, data: pa.Table, *, merge_schema: bool = False) -> bool:
    """Write ``data`` (one row per key) into the state table when the version ``dt``
    holds has no rows (a table created empty just now): what the MERGE would insert, for
    a fraction of its cost (a first run's MERGEs were most of its commit). An overwrite
    whose predicate reads the whole table, so it conflicts as the MERGE does: when another
    writer added rows since that version, it fails and returns False (nothing written),
    and the caller MERGEs into what is there. A plain append would not conflict, and two
    concurrent creators would each insert every key. ``merge_schema``: the data's new
    typed columns are added, as the MERGE of an evolving table adds them."""
    if dt.file_uris():
        return False
    try:
        write_deltalake(
            dt,
            data,
            mode="overwrite",
            predicate="true",  # the predicate is what makes it read (and conflict)
            partition_by=SPECS[table].partition_by or None,
            schema_mode="merge" if merge_schema else None,
        )
    except CommitFailedError:
        dt.update_incremental()
        return False
    return True


def part_groups(dt: DeltaTable, source: pa.Table, key: str) -> list[list[int]]:
    """The ``part`` values of ``source`` in groups whose MERGE reads at most
    ``MERGE_TARGET_ROWS`` stored rows each (a part reading more alone): one MERGE, so
    one commit, per group. delta-rs holds the rows a MERGE reads in memory, and it reads
    only the stored files of those parts whose ``key`` range (file statistics) meets the
    source's: a first run, committed in listing order, reads none and takes one MERGE a
    slice; a night whose changes spread over the key space reads its parts whole."""
    bounds = source.group_by("part").aggregate([(key, "min"), (key, "max")])
    columns = (bounds.column(c).to_pylist() for c in ("part", f"{key}_min", f"{key}_max"))
    ranges: dict[int, tuple[Any, Any]] = {
        int(part): (low, high) for part, low, high in zip(*columns, strict=True)
    }
    stored: dict[int, int] = {}
    actions = pa.table(dt.get_add_actions(flatten=True))
    if actions.num_rows and "partition.part" in actions.column_names:
        names = actions.column_names

        def stat(name: str) -> list[Any]:
            return actions.column(name).to_pylist() if name in names else [None] * len(actions)

        for part, n, low, high in zip(
            actions.column("partition.part").to_pylist(),
            actions.column("num_records").to_pylist(),
            stat(f"min.{key}"),
            stat(f"max.{key}"),
            strict=True,
        ):
            wanted = ranges.get(int(part))
            if wanted is None:
                continue
            if low is not None and high is not None and (high < wanted[0] or low > wanted[1]):
                continue  # outside the source's keys: the MERGE skips the file
            stored[int(part)] = stored.get(int(part), 0) + int(n or 0)
    return packed([(part, stored.get(part, 0)) for part in sorted(ranges)], MERGE_TARGET_ROWS)


def packed(sized: Sequence[tuple[T, int]], limit: int) -> list[list[T]]:
    """The items of ``sized`` (item, rows) in order, in groups of at most ``limit`` rows
    (an item of more is a group alone)."""
    groups: list[list[T]] = []
    rows = 0
    for item, n in sized:
        if not groups or rows + n > limit:
            groups.append([])
            rows = 0
        groups[-1].append(item)
        rows += n
    return groups


def latest_per_key(spec: TableSpec, rows: pa.Table) -> pa.Table:
    """One row per key: the newest by ``spec.newer`` (the last one given on ties)."""
    if rows.num_rows <= 1 or unique_keys(rows, spec.keys):
        return rows  # the common case, told by Arrow alone (a DuckDB database costs ~15 ms)
    keys = ", ".join(f'"{k}"' for k in spec.keys)
    indexed = rows.append_column("__i", pa.array(range(rows.num_rows), pa.int64()))
    with duck.connect() as con:
        con.register("rows_in", indexed)
        out = con.execute(
            f"""SELECT * EXCLUDE (__i) FROM rows_in QUALIFY row_number() OVER (
                PARTITION BY {keys} ORDER BY "{spec.newer}" DESC NULLS LAST, __i DESC) = 1"""
        ).fetch_arrow_table()
    return out.cast(rows.schema)


def unique_keys(rows: pa.Table, keys: Sequence[str]) -> bool:
    """True when no two rows share a key."""
    groups = rows.select(list(keys)).group_by(list(keys)).aggregate([])
    return bool(groups.num_rows == rows.num_rows)


def _commit_properties(txn: tuple[str, int] | None) -> CommitProperties:
    """A write's commit, carrying the app transaction ``txn`` (app id, version) if given."""
    return CommitProperties(app_transactions=[Transaction(*txn)] if txn else None)


def with_commit_retries(write: Callable[[], T], table: str) -> T:
    """Run ``write`` again when its commit lost a race with another writer."""
    return COMMIT_BACKOFF.retrying(
        write, CommitFailedError, what=f"{table}: commit conflict", level=logging.INFO
    )


def stored_schema(data_dir: DataDir, table: str) -> pa.Schema | None:
    """The schema of the table's current version (None when it has none yet)."""
    dt = open_table(data_dir, table)
    return None if dt is None else pa.schema(dt.schema().to_arrow())


def table_names(data_dir: DataDir) -> list[str]:
    """Every table the project knows, plus the REST resource tables found in the lake."""
    names = [t for t in SPECS if not is_resource_table(t)]
    names += [n for n in files(data_dir).children(LAKE_DIR) if is_resource_table(n)]
    return names


def tables_present(data_dir: DataDir) -> Sequence[str]:
    """Names of the tables that exist in the lake (a folder without a Delta log, a stray
    copy say, is no table)."""
    lake_files = files(data_dir)
    present = set(lake_files.children(LAKE_DIR))
    return [
        t
        for t in table_names(data_dir)
        if t in present and "_delta_log" in lake_files.children(f"{LAKE_DIR}/{t}")
    ]
