"""The tables: their schemas and what kind of table each is.

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

from dataclasses import dataclass
from typing import Literal

import pyarrow as pa

_TS = pa.timestamp("us", tz="UTC")

SCHEMAS: dict[str, pa.Schema] = {
    "s3_objects": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("size", pa.int64()),
            ("last_modified", _TS),
            ("local_path", pa.string()),
            ("status", pa.string()),
            ("error", pa.string()),
            ("attempts", pa.int32()),
            ("seconds", pa.float64()),
            ("run_id", pa.string()),
            ("ingested_at", _TS),
        ]
    ),
    # Text extraction (ingest.extract): one part per run and download batch.
    "documents": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("kind", pa.string()),
            ("status", pa.string()),
            ("pages", pa.int32()),
            ("chars", pa.int64()),
            ("needs_ocr", pa.int32()),
            ("text", pa.string()),
            ("markdown", pa.string()),  # headings, lists and tables (ingest.extract.markdown)
            ("metadata", pa.string()),
            ("extractor", pa.string()),
            ("extractor_version", pa.string()),
            ("bytes", pa.int64()),
            ("seconds", pa.float64()),
            ("error", pa.string()),
            ("run_id", pa.string()),
            ("extracted_at", _TS),
        ]
    ),
    # Structured outputs of extraction (ingest.extract.structure), beside ``documents``:
    # the text of each page (DOCX, HTML and text files are one page; a DXF drawing has a
    # page per layout), each ATTRIB of a drawing's block references, and each drawing's
    # header data. ``etag`` says which version of the object a row comes from.
    "document_pages": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("status", pa.string()),  # ok; deleted once the object is gone
            ("page", pa.int32()),
            ("text", pa.string()),
            ("chars", pa.int64()),
            ("extractor", pa.string()),
            ("extractor_version", pa.string()),
            ("run_id", pa.string()),
            ("extracted_at", _TS),
        ]
    ),
    # Chunks for retrieval (ingest.extract.chunks): spans of a page's text, with a stable id.
    "document_chunks": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("status", pa.string()),  # ok; deleted once the object is gone
            ("position", pa.int32()),  # 1, 2, ... in reading order
            ("chunk_id", pa.string()),
            ("page_start", pa.int32()),
            ("page_end", pa.int32()),
            ("heading", pa.string()),  # the heading path: "Materials > Pipes"
            ("start", pa.int64()),  # the span in the page's text (document_pages.text)
            ("end", pa.int64()),
            ("text", pa.string()),
            ("chars", pa.int64()),
            ("extractor_version", pa.string()),
            ("run_id", pa.string()),
            ("extracted_at", _TS),
        ]
    ),
    "dxf_attributes": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("status", pa.string()),  # ok; deleted once the object is gone
            ("position", pa.int32()),  # 1, 2, ... in layout and drawing order
            ("layout", pa.string()),
            ("block", pa.string()),
            ("tag", pa.string()),
            ("value", pa.string()),
            ("layer", pa.string()),
            ("insert_x", pa.float64()),
            ("insert_y", pa.float64()),
            ("insert_z", pa.float64()),
            ("handle", pa.string()),
            ("extractor_version", pa.string()),
            ("run_id", pa.string()),
            ("extracted_at", _TS),
        ]
    ),
    "dxf_drawings": pa.schema(
        [
            ("bucket", pa.string()),
            ("key", pa.string()),
            ("etag", pa.string()),
            ("status", pa.string()),  # ok; deleted once the object is gone
            ("acadver", pa.string()),
            ("release", pa.string()),
            ("insunits", pa.int32()),
            ("units", pa.string()),
            ("layers", pa.list_(pa.string())),
            ("blocks", pa.list_(pa.string())),
            ("layouts", pa.list_(pa.string())),
            ("text_heights", pa.list_(pa.float64())),
            ("attributes", pa.int32()),
            ("extractor_version", pa.string()),
            ("run_id", pa.string()),
            ("extracted_at", _TS),
        ]
    ),
    "task_timings": pa.schema(
        [
            ("flow_run_id", pa.string()),
            ("flow_name", pa.string()),
            ("task_run_id", pa.string()),
            ("task_name", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
            ("seconds", pa.float64()),
            ("items", pa.int64()),
            ("bytes", pa.int64()),
            ("attempts", pa.int32()),
            ("state", pa.string()),
            ("error", pa.string()),
            ("worker", pa.string()),
        ]
    ),
    # One row per finished flow run (ingest.report.history): which deployment it belongs to, so a
    # run's summary can compare its stages with the previous run of the same deployment.
    "flow_runs": pa.schema(
        [
            ("flow_run_id", pa.string()),
            ("flow_name", pa.string()),
            ("deployment_id", pa.string()),
            ("parent_flow_run_id", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
            ("seconds", pa.float64()),
            ("items", pa.int64()),
            ("bytes", pa.int64()),
            ("failed", pa.int64()),
            ("state", pa.string()),
            ("message", pa.string()),
        ]
    ),
    # Each source (ingest.report.freshness): its last successful sync and its lag, one row per
    # flow and target, written by every run (a nightly run writes its children's rows) and
    # logged, one row per run.
    "source_freshness": pa.schema(
        [
            ("source", pa.string()),  # the child flow: s3-ingest, github-pulls
            ("target", pa.string()),  # what it reads: s3://bucket/prefix, owner/name, ...
            ("last_success", _TS),
            ("rows_changed", pa.int64()),  # objects or pull requests changed, last success
            ("lag_seconds", pa.float64()),  # checked_at - last_success
            ("state", pa.string()),  # this night's outcome
            ("seconds", pa.float64()),
            ("failed", pa.int64()),
            ("bytes", pa.int64()),
            ("flow_run_id", pa.string()),
            ("nightly_run_id", pa.string()),
            ("checked_at", _TS),
        ]
    ),
    # GitHub source (ingest.rest.github, the dialect): one part per run and repository.
    "pull_requests": pa.schema(
        [
            ("repo", pa.string()),
            ("number", pa.int64()),
            ("id", pa.int64()),
            ("title", pa.string()),
            ("state", pa.string()),
            ("draft", pa.bool_()),
            ("user_login", pa.string()),
            ("labels", pa.list_(pa.string())),
            ("created_at", _TS),
            ("updated_at", _TS),
            ("closed_at", _TS),
            ("merged_at", _TS),
            ("head_ref", pa.string()),
            ("base_ref", pa.string()),
            ("html_url", pa.string()),
            ("body", pa.string()),
            ("fetched_at", _TS),
            ("run_id", pa.string()),
        ]
    ),
    "api_requests": pa.schema(
        [
            ("run_id", pa.string()),
            ("repo", pa.string()),
            ("url", pa.string()),
            ("status", pa.int32()),
            ("seconds", pa.float64()),
            ("bytes", pa.int64()),
            ("from_cache", pa.bool_()),
            ("rate_remaining", pa.int64()),
            ("rate_limit", pa.int64()),
            ("rate_resource", pa.string()),
            ("attempt", pa.int32()),
            ("error", pa.string()),
            ("requested_at", _TS),
        ]
    ),
    "github_pages": pa.schema(
        [
            ("repo", pa.string()),
            ("state", pa.string()),
            ("per_page", pa.int32()),
            ("page", pa.int32()),
            ("url", pa.string()),
            ("etag", pa.string()),
            ("link", pa.string()),
            ("items", pa.int32()),
            ("newest_updated_at", _TS),
            ("oldest_updated_at", _TS),
            ("run_id", pa.string()),
            ("fetched_at", _TS),
        ]
    ),
    "github_syncs": pa.schema(
        [
            ("repo", pa.string()),
            ("state", pa.string()),
            ("per_page", pa.int32()),
            ("watermark", _TS),
            ("complete", pa.bool_()),
            ("stop_reason", pa.string()),
            ("pages", pa.int32()),
            ("requests", pa.int32()),
            ("not_modified", pa.int32()),
            ("items", pa.int64()),
            ("failed_pages", pa.int32()),
            ("run_id", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
        ]
    ),
    # REST sources (ingest.rest): what each host allowed in flight, and each listing's sync.
    "api_windows": pa.schema(
        [
            ("host", pa.string()),
            ("window_size", pa.int32()),
            ("ceiling", pa.int32()),
            ("limit_answers", pa.int64()),
            ("requests", pa.int64()),
            ("run_id", pa.string()),
            ("updated_at", _TS),
        ]
    ),
    "rest_syncs": pa.schema(
        [
            ("source", pa.string()),
            ("resource", pa.string()),
            ("parent_key", pa.string()),
            ("watermark", pa.string()),
            ("complete", pa.bool_()),
            ("stop_reason", pa.string()),
            ("pages", pa.int32()),
            ("requests", pa.int32()),
            ("items", pa.int64()),
            ("failed_pages", pa.int32()),
            ("page_size", pa.int32()),
            ("run_id", pa.string()),
            ("started_at", _TS),
            ("ended_at", _TS),
        ]
    ),
    # Every change of a REST resource table's columns (ingest.storage.evolve): a column
    # added, or a variant column made for values of another type than the stored one.
    "schema_history": pa.schema(
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
            ("changed_at", _TS),
        ]
    ),
}

# One table per resource of a declared REST source, named ``<source>__<resource>``: the
# record as JSON in ``data``, its primary key (for a child resource, prefixed with its
# parent's) in ``key``, and the incremental cursor's value in ``cursor``.
RESOURCE_SEPARATOR = "__"
RESOURCE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("parent_key", pa.string()),
        ("source", pa.string()),
        ("resource", pa.string()),
        ("cursor", pa.string()),
        ("data", pa.string()),
        ("run_id", pa.string()),
        ("fetched_at", _TS),
    ]
)


def is_resource_table(name: str) -> bool:
    """``tickets__comments`` is the table of resource ``comments`` of source ``tickets``."""
    source, sep, resource = name.partition(RESOURCE_SEPARATOR)
    return bool(sep and source and resource)


# Fixed tables whose rows also carry the typed columns of their API records
# (``ingest.rest.typed``): the GitHub dialect's pull requests.
TYPED_FIXED = frozenset({"pull_requests"})


def evolving(name: str) -> bool:
    """A table whose columns follow its records (``ingest.storage.evolve``): a REST resource
    table, or a fixed table of ``TYPED_FIXED`` (its fixed columns first)."""
    return name in TYPED_FIXED or is_resource_table(name)


class _Schemas(dict[str, pa.Schema]):
    """The fixed schemas, plus the one schema of every resource table."""

    def __missing__(self, name: str) -> pa.Schema:
        if not is_resource_table(name):
            raise KeyError(name)
        self[name] = RESOURCE_SCHEMA
        return RESOURCE_SCHEMA

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and is_resource_table(name))


SCHEMAS = _Schemas(SCHEMAS)


def _without(schema: pa.Schema, *names: str) -> pa.Schema:
    return pa.schema([f for f in schema if f.name not in names])


# History tables fed by a state table: the same rows (without the bulky text).
SCHEMAS["s3_object_log"] = SCHEMAS["s3_objects"]
SCHEMAS["document_log"] = _without(SCHEMAS["documents"], "text", "markdown")
SCHEMAS["pull_request_log"] = _without(SCHEMAS["pull_requests"], "body")
SCHEMAS["source_nights"] = SCHEMAS["source_freshness"]

Kind = Literal["state", "history"]
STATE_PARTS = 16  # hash partitions of the per-object state tables (see TableSpec.parts)


def _per_document(name: str, position: str) -> TableSpec:
    """A state table of many rows per document, keyed by object and ``position``, the
    object's key last (its hash is the ``part``)."""
    return TableSpec(
        name,
        "state",
        keys=("bucket", position, "key"),
        newer="extracted_at",
        sort=("bucket", "key", position),
        parts=STATE_PARTS,
    )


@dataclass(frozen=True, slots=True)
class TableSpec:
    """How a table is written and maintained.

    Attributes:
        name: Table (and view) name.
        kind: ``state`` (MERGE by ``keys``) or ``history`` (append, by ``day``).
        keys: Columns identifying a row of a state table.
        newer: Timestamp column; a state row replaces the stored one only when newer.
        day_from: Timestamp column the ``day`` partition of a history table comes from.
        log: History table that also receives every row merged into this state table.
        sort: Columns compaction orders a state table by, so key-range reads skip files.
        parts: For a large state table, the number of ``part`` partitions (a hash of the
            key): a MERGE rewrites one part at a time, so its memory follows the part,
            not the table (measured: a 1,000-row MERGE into a 1.2M-row table cost
            +236 MB unpartitioned, +70 MB into one of 16 parts).
    """

    name: str
    kind: Kind
    keys: tuple[str, ...] = ()
    newer: str = ""
    day_from: str = ""
    log: str = ""
    sort: tuple[str, ...] = ()
    parts: int = 0

    @property
    def partition_by(self) -> list[str] | None:
        if self.kind == "history":
            return ["day"]
        return ["part"] if self.parts else None

    @property
    def schema(self) -> pa.Schema:
        schema = SCHEMAS[self.name]
        if self.kind == "history":
            schema = schema.append(pa.field("day", pa.date32()))
        elif self.parts:
            schema = schema.append(pa.field("part", pa.int32()))
        return schema


class _Specs(dict[str, TableSpec]):
    """The fixed tables, plus a state table per REST resource, made on first use."""

    def __missing__(self, name: str) -> TableSpec:
        if not is_resource_table(name):
            raise KeyError(name)
        spec = TableSpec(name, "state", keys=("key",), newer="fetched_at", sort=("key",))
        self[name] = spec
        return spec

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or (isinstance(name, str) and is_resource_table(name))


SPECS: dict[str, TableSpec] = _Specs(
    (s.name, s)
    for s in (
        TableSpec(
            "s3_objects",
            "state",
            keys=("bucket", "key"),
            newer="ingested_at",
            log="s3_object_log",
            sort=("bucket", "key"),
            parts=STATE_PARTS,
        ),
        TableSpec("s3_object_log", "history", day_from="ingested_at"),
        TableSpec(
            "documents",
            "state",
            keys=("bucket", "key"),
            newer="extracted_at",
            log="document_log",
            sort=("bucket", "key"),
            parts=STATE_PARTS,
        ),
        TableSpec("document_log", "history", day_from="extracted_at"),
        # Keyed by object and position, the object's key last: its hash is the ``part``.
        _per_document("document_pages", "page"),
        _per_document("document_chunks", "position"),
        _per_document("dxf_attributes", "position"),
        TableSpec(
            "dxf_drawings",
            "state",
            keys=("bucket", "key"),
            newer="extracted_at",
            sort=("bucket", "key"),
        ),
        TableSpec("task_timings", "history", day_from="started_at"),
        TableSpec("flow_runs", "state", keys=("flow_run_id",), newer="ended_at"),
        TableSpec(
            "pull_requests",
            "state",
            keys=("repo", "number"),
            newer="fetched_at",
            log="pull_request_log",
            sort=("repo", "number"),
        ),
        TableSpec("pull_request_log", "history", day_from="fetched_at"),
        TableSpec("api_requests", "history", day_from="requested_at"),
        TableSpec("github_pages", "state", keys=("repo", "state", "url"), newer="fetched_at"),
        TableSpec("github_syncs", "history", day_from="started_at"),
        TableSpec(
            "source_freshness",
            "state",
            keys=("source", "target"),
            newer="checked_at",
            log="source_nights",
        ),
        TableSpec("source_nights", "history", day_from="checked_at"),
        TableSpec("api_windows", "state", keys=("host",), newer="updated_at"),
        TableSpec("rest_syncs", "history", day_from="started_at"),
        TableSpec("schema_history", "history", day_from="changed_at"),
    )
)
