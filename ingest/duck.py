"""DuckDB connections for the library: one place for their settings.

DuckDB (1.3 and later) keeps the bytes of the files a connection reads in an
in-process cache (``enable_external_file_cache``). The library reads many
files once each (a run's thousands of staged parts, the state's files per key
range), so the cache only adds memory: measured here, summing the timings a
run of 1M objects staged (4,400 small Parquet parts) peaked at +370 MB with it
and +30 MB without, and ran faster without. The Parquet footers, which are
read again and again, stay cached where asked (``parquet_metadata_cache``).
"""

from __future__ import annotations

from typing import Any

import duckdb

SETTINGS: dict[str, Any] = {"enable_external_file_cache": False}


def connect(database: str = ":memory:", **settings: Any) -> duckdb.DuckDBPyConnection:
    """``duckdb.connect`` with the library's settings (plus ``settings``)."""
    return duckdb.connect(database, config={**SETTINGS, **settings})
