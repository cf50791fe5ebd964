"""DuckDB connections for the library: one place for their settings.

DuckDB (1.3 and later) keeps the bytes of the files a connection reads in an
in-process cache (``enable_external_file_cache``). The library reads many
files once each (a run's thousands of staged parts, the state's files per key
range), so the cache only adds memory: measured here, summing the timings a
run of 1M objects staged (4,400 small Parquet parts) peaked at +370 MB with it
and +30 MB without, and ran faster without. The Parquet footers, which are
read again and again, stay cached where asked (``parquet_metadata_cache``).

Nothing is downloaded at run time: extensions are never installed on demand
(``autoinstall_known_extensions`` off). A lake on object storage is read
through delta-rs, which hands DuckDB Arrow datasets: a ``Relations`` keeps them
by name, and the connections made with it see them, so a ``storage.scan``
expression works in any of them. A run's lake session holds its ``Relations``
(``ingest.storage.location.LakeSession.relations``, gone when the session closes):
the connections of a bound location (``LakeLocation.connect``), of its small
queries and of the run's listing database are made with them. A name is derived
from what it reads (a table's URI and version, a run's staged parts), so whoever
asks for the same data again registers it again under the same name before using
it; a ``Relations`` keeps lazy datasets (a few KB each), the newest ``RELATIONS_KEPT``.

A new database costs ~15 ms (more on a busy machine), most of a small query's time:
a run's end asks a dozen small ones (its stage table, the previous run, stored
ETags). ``cursor`` gives those a connection of the run's ``SmallQueries``, one
in-memory database its lake session holds (``ingest.storage.location.LakeSession``,
closed with the run; ~0.5 ms a query, its own connection per call, so threads never
share one); without a session, a database of its own for the query. Work over many
rows keeps a database of its own (``connect``), whose memory goes back when it closes.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from typing import Any

import duckdb

SETTINGS: dict[str, Any] = {
    "enable_external_file_cache": False,
    "autoinstall_known_extensions": False,
}
RELATIONS_KEPT = 256  # Arrow relations kept registered (datasets are lazy: a few KB each)


class Relations:
    """Arrow tables and datasets registered by name (see the module doc), the newest
    ``RELATIONS_KEPT``; ``on`` registers them with a connection. Thread-safe."""

    def __init__(self) -> None:
        self._data: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()

    def register(self, identity: str, data: Any) -> str:
        """Keep ``data`` under a name derived from ``identity`` for the connections made
        with these relations from now on; returns the name."""
        name = "arrow_" + hashlib.sha1(identity.encode()).hexdigest()[:16]
        with self._lock:
            self._data[name] = data
            self._data.move_to_end(name)
            while len(self._data) > RELATIONS_KEPT:
                self._data.popitem(last=False)
        return name

    def on(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """``con`` (a connection or a cursor: registrations are per connection) with the
        relations registered."""
        with self._lock:
            relations = list(self._data.items())
        for name, data in relations:
            con.register(name, data)
        return con

    def clear(self) -> None:
        with self._lock:
            self._data.clear()


def connect(
    database: str = ":memory:", *, relations: Relations | None = None, **settings: Any
) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` with the library's settings (plus ``settings``), with
    ``relations`` registered (a lake session's: ``LakeLocation.connect``)."""
    con = duckdb.connect(database, config={**SETTINGS, **settings})
    return relations.on(con) if relations is not None else con


class SmallQueries:
    """One in-memory database for a run's small queries (see the module doc), opened on
    the first ``cursor``, closed by ``close``, its connections made with ``relations``
    (its lake session's). A forked child opens its own. Thread-safe."""

    def __init__(self, relations: Relations | None = None) -> None:
        self._relations = relations
        self._db: tuple[int, duckdb.DuckDBPyConnection] | None = None
        self._closed = False
        self._lock = threading.Lock()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of the database, with its relations. Close it when done (``with``);
        the database stays."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the database for small queries is closed")
            if self._db is None or self._db[0] != os.getpid():
                self._db = (os.getpid(), duckdb.connect(":memory:", config=dict(SETTINGS)))
            con = self._db[1].cursor()
        return self._relations.on(con) if self._relations is not None else con

    def close(self) -> None:
        with self._lock:
            self._closed = True
            db, self._db = self._db, None
        if db is not None and db[0] == os.getpid():
            db[1].close()


def records(cur: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    """The rows of the query ``cur`` ran, each a dict by column name."""
    columns = [d[0] for d in cur.description or ()]
    return [dict(zip(columns, row, strict=True)) for row in cur.fetchall()]


def sql_literal(value: object) -> str:
    """``value`` as an SQL string literal (its quotes doubled)."""
    return "'" + str(value).replace("'", "''") + "'"


def cursor(queries: SmallQueries | None = None) -> duckdb.DuckDBPyConnection:
    """A connection for a small query: a cursor of ``queries`` (a run's, with its lake
    session's relations: ``LakeLocation.queries``), else a database of its own. Close it
    when done (``with``)."""
    return queries.cursor() if queries is not None else connect()
