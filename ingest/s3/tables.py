"""The S3 source's tables: each object's state, and its log."""

from __future__ import annotations

import pyarrow as pa

from ingest.storage.tables import STATE_PARTS, TS, TableSpec

S3_OBJECTS = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("size", pa.int64()),
        ("last_modified", TS),
        ("local_path", pa.string()),
        ("status", pa.string()),
        ("error", pa.string()),
        ("attempts", pa.int32()),
        ("seconds", pa.float64()),
        ("run_id", pa.string()),
        ("ingested_at", TS),
    ]
)

TABLES = (
    TableSpec(
        "s3_objects",
        "state",
        S3_OBJECTS,
        keys=("bucket", "key"),
        newer="ingested_at",
        log="s3_object_log",
        sort=("bucket", "key"),
        parts=STATE_PARTS,
    ),
    TableSpec("s3_object_log", "history", S3_OBJECTS, day_from="ingested_at"),
)
