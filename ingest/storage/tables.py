"""The machinery of the tables: what kind of table each is, and the catalog of them.

Each source owns its tables' schemas (``ingest.s3.tables``, ``ingest.extract.tables``,
``ingest.rest.tables``, ``ingest.report.tables``); ``ingest.catalog`` gathers them, with
storage's own ``schema_history``, and hands them to storage in one explicit call
(``ingest.catalog.load``). Storage imports no source: until the catalog is loaded, a
lookup fails loudly rather than skip a table it was not told of (a run's staged rows).

Two kinds, both Delta Lake tables (see ``ingest.storage.lake``):

* **state** tables hold the current truth, one row per key (``s3_objects`` per
  bucket and key, ``documents``, ``pull_requests``, ``github_pages``,
  ``flow_runs``, ``source_freshness``). A run MERGEs its rows in by key; a row replaces the stored
  one only when it is newer (``newer``), so replaying a commit changes nothing,
  and a night with nothing new writes nothing.
* **history** tables are append-only logs (``s3_object_log``, ``task_timings``,
  ``api_requests``, ...), partitioned by ``day`` and trimmed by the retention
  setting. A state table may feed one (``log``): every row merged into
  ``s3_objects`` is also appended to ``s3_object_log``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

from ingest.errors import IngestError

TS = pa.timestamp("us", tz="UTC")
Kind = Literal["state", "history"]
STATE_PARTS = 16  # hash partitions of the per-object state tables (see TableSpec.parts)

# One table per resource of a declared REST source, named ``<source>__<resource>``; its
# columns are the REST source's (``ingest.rest.tables.RESOURCE_SCHEMA``).
RESOURCE_SEPARATOR = "__"


def is_resource_table(name: str) -> bool:
    """``tickets__comments`` is the table of resource ``comments`` of source ``tickets``."""
    source, sep, resource = name.partition(RESOURCE_SEPARATOR)
    return bool(sep and source and resource)


def without(schema: pa.Schema, *names: str) -> pa.Schema:
    """``schema`` without ``names``: a history table fed by a state table, without the
    bulky text."""
    return pa.schema([f for f in schema if f.name not in names])


@dataclass(frozen=True, slots=True)
class TableSpec:
    """How a table is written and maintained.

    Attributes:
        name: Table (and view) name.
        kind: ``state`` (MERGE by ``keys``) or ``history`` (append, by ``day``).
        columns: The table's own columns (without ``day`` or ``part``).
        keys: Columns identifying a row of a state table.
        newer: Timestamp column; a state row replaces the stored one only when newer.
        day_from: Timestamp column the ``day`` partition of a history table comes from.
        log: History table that also receives every row merged into this state table.
        sort: Columns compaction orders a state table by, so key-range reads skip files.
        parts: For a large state table, the number of ``part`` partitions (a hash of the
            key): a MERGE rewrites one part at a time, so its memory follows the part,
            not the table (measured: a 1,000-row MERGE into a 1.2M-row table cost
            +236 MB unpartitioned, +70 MB into one of 16 parts).
        typed: Its rows also carry the typed columns of their API records
            (``ingest.rest.typed``), after its fixed ones (``ingest.storage.evolve``).
    """

    name: str
    kind: Kind
    columns: pa.Schema
    keys: tuple[str, ...] = ()
    newer: str = ""
    day_from: str = ""
    log: str = ""
    sort: tuple[str, ...] = ()
    parts: int = 0
    typed: bool = False

    @property
    def partition_by(self) -> list[str] | None:
        if self.kind == "history":
            return ["day"]
        return ["part"] if self.parts else None

    @property
    def schema(self) -> pa.Schema:
        if self.kind == "history":
            return self.columns.append(pa.field("day", pa.date32()))
        if self.parts:
            return self.columns.append(pa.field("part", pa.int32()))
        return self.columns


def per_document(name: str, columns: pa.Schema, position: str) -> TableSpec:
    """A state table of many rows per document, keyed by object and ``position``, the
    object's key last (its hash is the ``part``)."""
    return TableSpec(
        name,
        "state",
        columns,
        keys=("bucket", position, "key"),
        newer="extracted_at",
        sort=("bucket", "key", position),
        parts=STATE_PARTS,
    )


# Storage's own table (written by ``ingest.storage.commit``): every change of a REST
# resource table's columns (``ingest.storage.evolve``), a column added, or a variant
# column made for values of another type than the stored one.
SCHEMA_HISTORY = TableSpec(
    "schema_history",
    "history",
    pa.schema(
        [
            ("source", pa.string()),
            ("resource", pa.string()),
            ("table_name", pa.string()),
            ("column_name", pa.string()),
            ("change", pa.string()),  # added | variant
            ("old_type", pa.string()),
            ("new_type", pa.string()),
            ("base_column", pa.string()),  # of a variant column: the column it stands beside
            ("run_id", pa.string()),
            ("changed_at", TS),
        ]
    ),
    day_from="changed_at",
)


class CatalogNotLoadedError(IngestError, RuntimeError):
    """A table looked up before ``ingest.catalog.load`` handed storage the tables."""


class Catalog(Mapping[str, TableSpec]):
    """Every table by name: the fixed tables it was given, plus a state table per REST
    resource (``RESOURCE_SEPARATOR`` in its name), made on lookup. Empty and loud until
    ``install``: iterating it, or asking it for a name, raises ``CatalogNotLoadedError``."""

    def __init__(self) -> None:
        self._fixed: dict[str, TableSpec] = {}
        self._resource: pa.Schema | None = None

    def install(self, specs: Iterable[TableSpec], resource: pa.Schema) -> None:
        """Take every table at once (a second call replaces them)."""
        self._fixed = {s.name: s for s in specs}
        self._resource = resource

    def loaded(self) -> dict[str, TableSpec]:
        """The fixed tables, or ``CatalogNotLoadedError`` before ``install``."""
        if self._resource is None:
            raise CatalogNotLoadedError(
                "the table catalog is not loaded: call ingest.catalog.load() first"
            )
        return self._fixed

    def __getitem__(self, name: str) -> TableSpec:
        fixed = self.loaded()
        if name in fixed:
            return fixed[name]
        if not is_resource_table(name):
            raise KeyError(name)
        assert self._resource is not None
        return TableSpec(
            name, "state", self._resource, keys=("key",), newer="fetched_at", sort=("key",)
        )

    def __iter__(self) -> Iterator[str]:
        return iter(self.loaded())

    def __len__(self) -> int:
        return len(self.loaded())


class _Columns(Mapping[str, pa.Schema]):
    """Each table's own columns (``TableSpec.columns``), by name, read from ``SPECS``."""

    def __getitem__(self, name: str) -> pa.Schema:
        return SPECS[name].columns

    def __iter__(self) -> Iterator[str]:
        return iter(SPECS)

    def __len__(self) -> int:
        return len(SPECS)


SPECS = Catalog()  # filled by ingest.catalog.load
SCHEMAS: Mapping[str, pa.Schema] = _Columns()


def evolving(name: str) -> bool:
    """A table whose columns follow its records (``ingest.storage.evolve``): a REST resource
    table, or a ``typed`` fixed table (its fixed columns first)."""
    spec = SPECS.get(name)
    return is_resource_table(name) or (spec is not None and spec.typed)
