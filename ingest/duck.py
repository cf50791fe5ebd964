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
through delta-rs, which hands DuckDB Arrow datasets: ``register_relation`` keeps
them by name for the process, and every connection made here sees them, so a
``storage.scan`` expression works in any of the library's connections. That
table is kept by the process on purpose, not by a run: a name is derived from what
it reads (a table's URI and version, a run's staged parts), so whoever asks for the
same data again registers it again under the same name before using it; it holds
lazy datasets (a few KB each), the newest ``RELATIONS_KEPT``; and the SQL that names
them is handed to connections anywhere in the library, which could not all be given
one run's table.

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

_relations: OrderedDict[str, Any] = OrderedDict()
_relations_lock = threading.Lock()


def register_relation(identity: str, data: Any) -> str:
    """Keep ``data`` (an Arrow table or dataset) registered under a name derived from
    ``identity`` in every connection made by ``connect`` from now on; returns the name."""
    name = "arrow_" + hashlib.sha1(identity.encode()).hexdigest()[:16]
    with _relations_lock:
        _relations[name] = data
        _relations.move_to_end(name)
        while len(_relations) > RELATIONS_KEPT:
            _relations.popitem(last=False)
    return name


def with_relations(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` (a connection or a cursor: registrations are per connection) with the
    registered Arrow relations."""
    with _relations_lock:
        relations = list(_relations.items())
    for name, data in relations:
        con.register(name, data)
    return con


def connect(database: str = ":memory:", **settings: Any) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` with the library's settings (plus ``settings``), with the
    registered Arrow relations."""
    return with_relations(duckdb.connect(database, config={**SETTINGS, **settings}))


class SmallQueries:
    """One in-memory database for a run's small queries (see the module doc), opened on
    the first ``cursor``, closed by ``close``. A forked child opens its own. Thread-safe."""

    def __init__(self) -> None:
        self._db: tuple[int, duckdb.DuckDBPyConnection] | None = None
        self._closed = False
        self._lock = threading.Lock()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A connection of the database, with the registered Arrow relations. Close it when
        done (``with``); the database stays."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the database for small queries is closed")
            if self._db is None or self._db[0] != os.getpid():
                self._db = (os.getpid(), duckdb.connect(":memory:", config=dict(SETTINGS)))
            return with_relations(self._db[1].cursor())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            db, self._db = self._db, None
        if db is not None and db[0] == os.getpid():
            db[1].close()


def cursor(queries: SmallQueries | None = None) -> duckdb.DuckDBPyConnection:
    """A connection for a small query, with the registered Arrow relations: a cursor of
    ``queries`` (a run's: ``LakeLocation.queries``), else a database of its own. Close it
    when done (``with``)."""
    return queries.cursor() if queries is not None else connect()
