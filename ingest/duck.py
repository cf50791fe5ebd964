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
``storage.scan`` expression works in any of the library's connections.

A new database costs ~15 ms (more on a busy machine), most of a small query's time:
a run's end asks a dozen small ones (its stage table, the previous run, stored
ETags). ``cursor`` gives those a connection of one in-memory database the process
shares (~0.5 ms each; its own connection per call, so threads never share one);
work over many rows keeps a database of its own (``connect``), whose memory goes
back when it closes.
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


_shared: tuple[int, duckdb.DuckDBPyConnection] | None = None
_shared_lock = threading.Lock()


def cursor() -> duckdb.DuckDBPyConnection:
    """A connection of the process's shared in-memory database, with the registered
    Arrow relations: for small queries (see the module doc). Close it when done (``with``);
    the database stays. A forked child makes its own."""
    global _shared
    with _shared_lock:
        if _shared is None or _shared[0] != os.getpid():
            _shared = (os.getpid(), duckdb.connect(":memory:", config=dict(SETTINGS)))
        return with_relations(_shared[1].cursor())
