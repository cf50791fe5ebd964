"""The catalog of every table: the one place above storage and the sources that gathers
each source's tables (``ingest.s3.tables``, ``ingest.extract.tables``,
``ingest.rest.tables``, ``ingest.report.tables``) with storage's own, and hands them to
storage (``ingest.storage.tables.SPECS``), which imports no source.

Importing it changes nothing; ``load`` does, in one call that hands over every table at
once. The process set-up (``ingest.setup_process``: every process that runs a flow, a
Dask worker's preload) calls it, the command where it reaches the lake
(``cli.options.lake_of``), and opening a run's context (``ingest.context``: a task on a
worker that has not run the preload yet). Storage refuses
a lookup before it, so a process that never loaded it fails loudly instead of skipping a
table: recovery of a dead run's staged rows sees every table, whichever sources the
recovering process imported.
"""

from __future__ import annotations

from ingest.extract import tables as extract
from ingest.report import tables as report
from ingest.rest import tables as rest
from ingest.s3 import tables as s3
from ingest.storage import tables as storage

TABLES = (*s3.TABLES, *extract.TABLES, *report.TABLES, *rest.TABLES, storage.SCHEMA_HISTORY)


def load() -> None:
    """Hand every table to storage (again: the same tables)."""
    storage.SPECS.install(TABLES, rest.RESOURCE_SCHEMA)
