"""DuckDB over the lake: views named like the tables, reading each table's current version.

A view lists the exact Parquet files of its table's current Delta version
(``read_parquet([...])``), so the stock ``duckdb`` CLI reads the tables with no
extension at all (nothing is downloaded at run time), and a file the table's
log does not name (a crashed writer's leftover, a stray copy) is never read.

* ``query`` and ``connect`` build the views in an in-memory database each time:
  always the current version, and never blocked by someone holding
  ``warehouse.duckdb`` open.
* ``query_read_only`` (``ingest query``) reads the same tables as Arrow datasets
  of their current Delta versions, registered before the connection is locked
  (``enable_external_access = false``, ``lock_configuration = true``, Python
  replacement scans off): the views are the only way to the lake, no other file
  can be read or written (``COPY``, ``read_csv('/etc/passwd')``, ``ATTACH``,
  ``INSTALL``/``LOAD`` all fail), and every statement but ``SELECT`` and
  ``EXPLAIN`` is refused before it runs (``ReadOnlyQueryError``). A view over
  file names cannot serve here: DuckDB checks external access when a view is
  read, not when it is made.
* ``refresh_warehouse`` writes the same views into ``warehouse.duckdb`` for people
  who open it with the CLI; runs call it after they commit. When another process
  holds the file it is left alone and refreshed by the next run (or
  ``ingest query``): the lake is the record, the database file only a convenience
  that can always be rebuilt.

Files a view names stay readable until vacuum removes them, which keeps every
file for ``vacuum_retention_hours`` (7 days by default) after it left the table.

A lake on object storage (``s3://``) is read through delta-rs: the table's
current version as a pyarrow dataset (its log decides the files; delta-rs's own
object-store client reads them, with DuckDB's filters and column choice pushed
down), registered with the run's lake session (``LakeSession.relations``, see ``ingest.duck``).
DuckDB needs no extension for it, so nothing is downloaded at run time; the
figures are in ``benchmarks/lake.md``. The stock ``duckdb`` CLI cannot read
``s3://`` Delta tables without the ``httpfs`` and ``delta`` extensions, which it
would download (the registry's builds lag DuckDB 1.5.6), so ``warehouse.duckdb``
cannot hold views over them: runs leave it alone (they may run on any worker),
and ``ingest warehouse`` (``snapshot_warehouse``) copies the tables' current
versions into it on the machine where someone wants the CLI, a snapshot rebuilt
from the lake whenever asked. ``ingest query`` needs no snapshot.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import duckdb
import pyarrow as pa

from ingest import duck
from ingest.errors import IngestError
from ingest.storage import evolve, lake
from ingest.storage.location import DataDir, bound_for_call, locate
from ingest.storage.tables import SPECS, TableSpec, evolving

T = TypeVar("T")

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

WAREHOUSE = "warehouse.duckdb"
_STAMP = ".warehouse-views"
_OWED = ".warehouse-owed"


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _duck_types(schema: pa.Schema) -> list[str]:
    """DuckDB's type names of ``schema``'s columns: told by Arrow alone for the types the
    tables use (``evolve.duck_type``), else asked of DuckDB (its first ``from_arrow`` in a process
    costs ~90 ms, most of a small run's views)."""
    named = [evolve.duck_type(f.type) for f in schema]
    if all(named):
        return cast(list[str], named)
    with duck.cursor() as con:
        return [str(t) for t in con.from_arrow(schema.empty_table()).types]


# DuckDB's type names of an Arrow schema, by the schema's text: what they are does not
# depend on the run, the lake or the time, so the process keeps them.
_TYPES: dict[str, list[str]] = {}

# Where the database file that holds a view lies, told by DuckDB at bind time: a
# persistent database's temp_directory is ``<file>.tmp`` unless someone set another.
# A stored view names its files relative to that folder, so a data folder moved or
# copied whole reads its own files (never the original's); with another temp_directory,
# the files are looked for relative to the working folder.
_HERE = (
    r"regexp_extract(current_setting('temp_directory'), '^(.*[/\\])?warehouse\.duckdb\.tmp$', 1)"
)


def _types(schema: pa.Schema) -> list[str]:
    key = schema.to_string(show_schema_metadata=False)
    types = _TYPES.get(key)
    if types is None:
        types = _TYPES[key] = _duck_types(schema)
    return types


def table_schema(data_dir: DataDir, spec: TableSpec) -> pa.Schema:
    """The columns a table's view shows: its spec's, or for a REST resource table the
    stored ones (the fixed columns, then the typed columns its records brought; so too
    for ``pull_requests``)."""
    if evolving(spec.name):
        return schema_of(lake.open_table(data_dir, spec.name), spec)
    return spec.schema


def schema_of(dt: DeltaTable | None, spec: TableSpec) -> pa.Schema:
    """``table_schema`` of a table already open (None: not written yet)."""
    if dt is not None and evolving(spec.name):
        return evolve.plain_schema(pa.schema(dt.schema().to_arrow()))
    return spec.schema


def view_sql(
    spec: TableSpec,
    files: Iterable[str],
    *,
    schema: pa.Schema | None = None,
    relative_to: str | None = None,
) -> str:
    """``SELECT`` over the given files of the table, columns in the schema's order; with
    ``relative_to`` (a folder the files lie under), the files are named relative to the
    folder of the database file holding the view (see ``_HERE``)."""
    schema = schema if schema is not None else spec.schema
    types = _types(schema)
    files = list(files)
    empty = "SELECT " + ", ".join(
        f'CAST(NULL AS {t}) AS "{f.name}"' for f, t in zip(schema, types, strict=True)
    )
    if not files:
        return f"{empty} WHERE false"
    cols = ", ".join(
        f'CAST("{f.name}" AS {t}) AS "{f.name}"' for f, t in zip(schema, types, strict=True)
    )
    if relative_to is not None:
        # Absolute first: a data dir given as a relative path names its files absolutely.
        base = os.path.abspath(relative_to).rstrip("/\\") + "/"
        items = []
        for f in files:
            full = f if "://" in f else os.path.abspath(f)
            if full.startswith(base):  # under the folder: found from the database file
                items.append(f"{_HERE} || {_sql_str(full[len(base) :])}")
            else:  # elsewhere: named as it is
                items.append(_sql_str(f))
        listing = "[" + ", ".join(items) + "]"
    else:
        listing = "[" + ", ".join(_sql_str(f) for f in files) + "]"
    hive = "true" if spec.partition_by else "false"
    # The typed empty row set first: a column added to the schema later (task_timings.worker)
    # reads as NULL from files written before it, even when no file has it yet.
    return (
        f"SELECT {cols} FROM ({empty} WHERE false UNION ALL BY NAME "
        f"SELECT * FROM read_parquet({listing}, "
        f"hive_partitioning = {hive}, union_by_name = true))"
    )


def arrow_view_sql(spec: TableSpec, relation: str, schema: pa.Schema | None = None) -> str:
    """``SELECT`` over a registered Arrow relation of the table, columns in the schema's
    order and types."""
    schema = schema if schema is not None else spec.schema
    types = _types(schema)
    cols = ", ".join(
        f'CAST("{f.name}" AS {t}) AS "{f.name}"' for f, t in zip(schema, types, strict=True)
    )
    return f'SELECT {cols} FROM "{relation}"'


def _as_views(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return pa.string_view()
    if pa.types.is_list(t):
        return pa.list_(_as_views(t.value_type))
    return t


def _has_string_views(fragment: Any) -> bool:
    """Whether the file writes a string column as ``string_view`` (its footer is read)."""
    return any(pa.types.is_string_view(f.type) for f in fragment.physical_schema)


def _in_parallel(fn: Callable[[Any], T], items: list[Any]) -> list[T]:
    """``fn`` over ``items`` on up to 16 threads: a file's footer on object storage is a
    round trip each (16 partitions read one after another cost 16 of them per query)."""
    if len(items) < 2:
        return [fn(i) for i in items]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(16, len(items))) as pool:
        return list(pool.map(fn, items))


def arrow_dataset(dt: Any, spec: TableSpec) -> Any:
    """delta-rs's pyarrow dataset of the table's current version, typed as its files are.

    delta-rs 1.6 writes strings as ``string_view``; a dataset declared with plain
    ``string`` (its default) makes DuckDB push down plain string literals, which pyarrow
    cannot compare with the files' views ("no kernel matching (string, string_view)").
    Declaring the files' own string type lets every pushed-down filter run."""
    schema = evolve.plain_schema(pa.schema(dt.schema().to_arrow()))
    if not evolving(spec.name):
        schema = spec.schema
    views = set(_in_parallel(_has_string_views, list(dt.to_pyarrow_dataset().get_fragments())))
    if views == {True, False}:
        # Files of both kinds (written by different paths, or before and after an upgrade):
        # no declared type lets pyarrow compare a pushed-down literal with every file's
        # columns, so the rows are read into one table of plain strings. Only small
        # tables mix (the runs' history); the state tables are written one way.
        table = dt.to_pyarrow_dataset().to_table()
        return table.cast(pa.schema([(f.name, schema.field(f.name).type) for f in table.schema]))
    if views == {True}:
        schema = pa.schema([pa.field(f.name, _as_views(f.type)) for f in schema])
    return dt.to_pyarrow_dataset(schema=schema)


def table_sql(data_dir: DataDir, table: str, prune: lake.Prune | None = None) -> str:
    """``SELECT`` over the table's current version that any library connection can run:
    the listed Parquet files of a local lake (with ``prune``, the files that may hold
    the rows the caller's query asks for: ``lake.data_files``), or delta-rs's Arrow
    dataset of a lake on object storage (filtered by DuckDB's pushed-down predicates)."""
    spec = SPECS[table]
    loc = locate(data_dir)
    dt = lake.open_table(loc, table)  # once: each opening reads the table's log
    if not loc.remote:
        files = lake.files_of(dt, prune) if dt is not None else []
        return view_sql(spec, files, schema=schema_of(dt, spec))
    if dt is None:
        return view_sql(spec, [])
    dataset = arrow_dataset(dt, spec)
    name = loc.relations.register(f"{dt.table_uri}@{dt.version()}", dataset)
    return arrow_view_sql(spec, name, dataset.schema if evolving(table) else None)


def files_sql(data_dir: DataDir, table: str, uris: list[str]) -> str:
    """``SELECT *`` over some files of the table's current version (as ``data_files``
    names them), for any library connection: read where they are, nothing copied."""
    loc = locate(data_dir)
    if not loc.remote:
        listing = ", ".join(_sql_str(u) for u in uris)
        return f"SELECT * FROM read_parquet([{listing}], union_by_name = true)"
    import pyarrow.dataset as pads

    dt = lake.open_table(loc, table)
    if dt is None or not uris:
        return view_sql(SPECS[table], [])
    whole = arrow_dataset(dt, SPECS[table])
    root = dt.table_uri.rstrip("/")
    wanted = set(uris)
    fragments = [f for f in whole.get_fragments() if f"{root}/{f.path}" in wanted]
    some = pads.FileSystemDataset(fragments, whole.schema, whole.format, whole.filesystem)
    identity = hashlib.sha256("\n".join(sorted(wanted)).encode()).hexdigest()
    return f'SELECT * FROM "{loc.relations.register(f"files:{root}:{identity}", some)}"'


def views(data_dir: DataDir, *, stored: bool = False) -> dict[str, str]:
    """View name -> ``SELECT`` for every table, at the tables' current versions. With
    ``stored``, for a database file: the tables' files by name (``s3://`` URIs for a lake
    on object storage), never a relation of this process."""
    if stored:
        return {name: stored_view_sql(data_dir, name) for name in lake.table_names(data_dir)}
    return {name: table_sql(data_dir, name) for name in lake.table_names(data_dir)}


def stored_view_sql(data_dir: DataDir, name: str) -> str:
    """A view for a database file: a local lake's files named relative to the file's
    folder (a data folder copied or moved whole reads its own files), an object store's
    by their ``s3://`` URIs."""
    loc = locate(data_dir)
    spec = SPECS[name]
    dt = lake.open_table(loc, name)
    files = lake.files_of(dt) if dt is not None else []
    schema = schema_of(dt, spec)
    if loc.remote:
        return view_sql(spec, files, schema=schema)
    return view_sql(spec, files, schema=schema, relative_to=str(loc.local_dir))


def connect(data_dir: DataDir) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB with a view per table at its current version."""
    with bound_for_call(data_dir) as loc:
        bodies = views(loc)  # before connecting: the connection sees what they register
        con = loc.connect()
    for name, body in bodies.items():
        con.execute(f'CREATE OR REPLACE TEMP VIEW "{name}" AS {body}')
    return con


def query(
    data_dir: DataDir, sql: str, params: Iterable[Any] | None = None
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run SQL over the tables; returns column names and rows."""
    with connect(data_dir) as con:
        cur = con.execute(sql, list(params) if params else None)
        columns = [d[0] for d in cur.description or ()]
        return columns, cur.fetchall()


class ReadOnlyQueryError(IngestError, ValueError):
    """A statement ``ingest query`` refuses: only ``SELECT`` and ``EXPLAIN`` run."""


_READ_ONLY = {duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN}


def connect_read_only(data_dir: DataDir) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB whose only way to data is a view per table (see the module doc)."""
    loc = locate(data_dir)
    con = duckdb.connect(":memory:", config={**duck.SETTINGS, "python_enable_replacements": False})
    try:
        for name in lake.table_names(loc):
            spec = SPECS[name]
            dt = lake.open_table(loc, name)
            if dt is None:
                body = view_sql(spec, [])
            else:
                relation = f"lake_{name}"
                dataset = arrow_dataset(dt, spec)
                con.register(relation, dataset)
                body = arrow_view_sql(spec, relation, dataset.schema if evolving(name) else None)
            con.execute(f'CREATE TEMP VIEW "{name}" AS {body}')
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return con


def query_read_only(data_dir: DataDir, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    """``query`` for people (``ingest query``): reads the tables, changes and reads nothing
    else. Raises ``ReadOnlyQueryError`` for a statement that is not a query."""
    with connect_read_only(data_dir) as con:
        for statement in con.extract_statements(sql):
            if statement.type not in _READ_ONLY:
                kind = statement.type.name
                raise ReadOnlyQueryError(
                    f"{kind} statements are refused: ingest query is read-only (SELECT and "
                    "EXPLAIN over the tables' views only; no COPY, ATTACH, INSTALL, LOAD, SET "
                    "or CREATE/DROP)"
                )
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description or ()]
        return columns, cur.fetchall()


_HOLDERS: dict[str, threading.Lock] = {}
_HOLDERS_LOCK = threading.Lock()


def _holding(db: os.PathLike[str]) -> threading.Lock:
    """This process's lock of the warehouse file ``db``."""
    with _HOLDERS_LOCK:
        return _HOLDERS.setdefault(os.path.realpath(db), threading.Lock())


def refresh_warehouse(
    data_dir: DataDir, *, tables: Iterable[str] | None = None, wait_seconds: float = 5.0
) -> bool:
    """Make ``warehouse.duckdb`` hold views over the tables' current versions (with
    ``tables``, over those only: the ones a run just wrote; opening every table of the
    lake to list its files costs ~20 ms a table, the longest step of a small run's end).

    Returns True when the views are current. Another process holding the file
    (someone in the ``duckdb`` CLI, which opens read-write by default) is waited
    for a few seconds, then left alone. A lake on object storage has no views in the
    file (see the module's docstring): nothing to do.
    """
    if locate(data_dir).remote:
        return True
    local = locate(data_dir).local_dir
    local.mkdir(parents=True, exist_ok=True)
    db = local / WAREHOUSE
    stamp = local / _STAMP
    owed = local / _OWED  # an earlier refresh found the file busy: all views are owed
    whole = tables is None or not db.exists() or owed.exists()
    wanted = set() if tables is None else written_with(tables)

    def current() -> tuple[dict[str, str], str | None]:
        """The views' bodies over the tables' versions as of now, and, for all views, the
        stamp's signature (None: some views only, the stamp no longer holds)."""
        if whole:
            bodies = views(data_dir, stored=True)
            return bodies, hashlib.sha256(repr(sorted(bodies.items())).encode()).hexdigest()
        present = set(lake.table_names(data_dir))
        return {name: stored_view_sql(data_dir, name) for name in sorted(wanted & present)}, None

    if whole:
        if db.exists() and stamp.exists() and stamp.read_text() == current()[1]:
            owed.unlink(missing_ok=True)
            return True
    elif not wanted & set(lake.table_names(data_dir)):
        return True
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            # Threads of one process (the nightly's two children ending together) share
            # the file's database, where two transactions replacing one view conflict: they
            # take turns. Each reads the tables' versions once it holds the file (another
            # process's commit and refresh in between is not overwritten with older views).
            with _holding(db), duck.connect(str(db)) as con:
                bodies, signature = current()
                # one transaction: a reader sees the views all old or all new, and the
                # file's log is written once, not once per view
                con.execute("BEGIN TRANSACTION")
                for name, body in bodies.items():
                    con.execute(f'CREATE OR REPLACE VIEW "{name}" AS {body}')
                con.execute("COMMIT")
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


def written_with(tables: Iterable[str]) -> set[str]:
    """``tables`` and the tables their commit writes besides them: a state table's log
    (``source_freshness`` appends to ``source_nights``) and, for a table whose columns
    follow its records, ``schema_history``. A commit reports only the tables it was
    given, so their views would otherwise stay at an older version."""
    wanted = set(tables)
    for name in list(wanted):
        spec = SPECS.get(name)
        if spec is not None and spec.log:
            wanted.add(spec.log)
        if evolving(name):
            wanted.add("schema_history")
    return wanted


def snapshot_warehouse(data_dir: DataDir) -> dict[str, int]:
    """Make ``warehouse.duckdb`` readable by the stock ``duckdb`` CLI, offline: views over
    a local lake (``refresh_warehouse``), or, for a lake on object storage, a copy of
    every table's current version (written beside it, then renamed over it: a reader
    sees the old snapshot or the new one). Returns rows per table (views: -1)."""
    loc = locate(data_dir)
    if not loc.remote:
        refresh_warehouse(loc)
        return {name: -1 for name in lake.table_names(loc)}
    loc.local_dir.mkdir(parents=True, exist_ok=True)
    db = loc.local_dir / WAREHOUSE
    tmp = db.with_name(f".{WAREHOUSE}.tmp")
    tmp.unlink(missing_ok=True)
    counts: dict[str, int] = {}
    with bound_for_call(loc) as bound:
        bodies = views(bound)
        con = bound.connect(str(tmp))
    with con:
        for name, body in bodies.items():
            con.execute(f'CREATE TABLE "{name}" AS {body}')
            row = con.execute(f'SELECT count(*) FROM "{name}"').fetchone()
            counts[name] = int(row[0]) if row else 0
        con.execute("CREATE TABLE lake_snapshot AS SELECT ? AS lake, now() AS taken_at", [loc.root])
    tmp.replace(db)
    return counts


def scan(
    data_dir: DataDir,
    table: str,
    *,
    staged_run: str | None = None,
    prune: lake.Prune | None = None,
) -> str:
    """A parenthesised ``SELECT`` over ``table`` at its current version, for use in
    ``FROM`` in any connection of ``ingest.duck``; with ``staged_run``, plus the rows that
    run has staged but not yet committed (a run reading its own figures before its
    commit). ``prune`` skips the stored files that cannot hold a row meeting it (the
    query must still filter: whole files are skipped, not rows)."""
    from ingest.storage import staging

    spec = SPECS[table]
    body = table_sql(data_dir, table, prune)
    staged = staging.scan_parts(data_dir, staged_run, table) if staged_run is not None else None
    if staged:
        day = f', CAST("{spec.day_from}" AS DATE) AS "day"' if spec.kind == "history" else ""
        body = f"SELECT * FROM ({body}) UNION ALL BY NAME SELECT *{day} FROM ({staged})"
    return f"({body})"
