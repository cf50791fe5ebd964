"""S3 Inventory reports written the way AWS writes them, for the tests and the demo.

A local S3 server (moto) has no inventory service, so ``write_inventory`` plays
its part: it lists a source bucket (or takes the rows it is given) and writes a
report into a destination bucket with AWS's layout and file formats::

    <dest-prefix>/<source-bucket>/<config-id>/YYYY-MM-DDTHH-MMZ/manifest.json
    <dest-prefix>/<source-bucket>/<config-id>/YYYY-MM-DDTHH-MMZ/manifest.checksum
    <dest-prefix>/<source-bucket>/<config-id>/data/<uuid>.csv.gz | .parquet | .orc
    <dest-prefix>/<source-bucket>/<config-id>/hive/dt=YYYY-MM-DD-HH-MM/symlink.txt

What readers must cope with is reproduced: CSV files are gzipped, have no
header and quote every field; CSV keys are URL-encoded as HTML forms encode
them (a space as ``+``, a ``+`` as ``%2B``, ``/`` kept); Parquet and ORC use
snake_case column names and millisecond timestamps; rows are spread over the
data files in no particular order.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import json
import random
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote_plus

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.records import S3Object
from ingest.s3 import list_objects

Format = Literal["CSV", "Parquet", "ORC"]


@dataclass(frozen=True, slots=True)
class InventoryRow:
    """One row of a report: an object version, or a delete marker (no size, no ETag)."""

    key: str
    size: int | None
    last_modified: datetime
    etag: str | None
    version_id: str = ""
    is_latest: bool = True
    is_delete_marker: bool = False
    storage_class: str = "STANDARD"


# (CSV name, Parquet/ORC name, Arrow type, Parquet type, ORC type, version field?)
_FIELDS: list[tuple[str, str, pa.DataType, str, str, bool]] = [
    ("Bucket", "bucket", pa.string(), "required binary bucket (UTF8)", "string", False),
    ("Key", "key", pa.string(), "required binary key (UTF8)", "string", False),
    ("VersionId", "version_id", pa.string(), "optional binary version_id (UTF8)", "string", True),
    ("IsLatest", "is_latest", pa.bool_(), "optional boolean is_latest", "boolean", True),
    (
        "IsDeleteMarker",
        "is_delete_marker",
        pa.bool_(),
        "optional boolean is_delete_marker",
        "boolean",
        True,
    ),
    ("Size", "size", pa.int64(), "optional int64 size", "bigint", False),
    (
        "LastModifiedDate",
        "last_modified_date",
        pa.timestamp("ms", tz="UTC"),
        "optional int64 last_modified_date (TIMESTAMP_MILLIS)",
        "timestamp",
        False,
    ),
    ("ETag", "e_tag", pa.string(), "optional binary e_tag (UTF8)", "string", False),
    (
        "StorageClass",
        "storage_class",
        pa.string(),
        "optional binary storage_class (UTF8)",
        "string",
        False,
    ),
    (
        "IsMultipartUploaded",
        "is_multipart_uploaded",
        pa.bool_(),
        "optional boolean is_multipart_uploaded",
        "boolean",
        False,
    ),
]
_SUFFIX = {"CSV": ".csv.gz", "Parquet": ".parquet", "ORC": ".orc"}


def write_inventory(
    client: Any,
    source_bucket: str,
    dest_bucket: str,
    dest_prefix: str,
    config_id: str,
    *,
    fmt: Format = "CSV",
    objects: Iterable[S3Object | InventoryRow] | None = None,
    files: int = 2,
    when: datetime | None = None,
    all_versions: bool | None = None,
) -> str:
    """Write one inventory report of ``source_bucket`` into ``dest_bucket``.

    Args:
        client: a boto3 S3 client.
        source_bucket: the inventoried bucket: listed when ``objects`` is None,
            and named in every row and in the layout.
        dest_bucket: where the report goes.
        dest_prefix: the configuration's destination prefix ("" for none).
        config_id: the inventory configuration's id.
        fmt: ``"CSV"``, ``"Parquet"`` or ``"ORC"``.
        objects: the rows to report instead of the bucket's current contents.
        files: data files to spread the rows over (at least one is written).
        when: the report's time (its folder name and ``creationTimestamp``); now by default.
        all_versions: include the VersionId, IsLatest and IsDeleteMarker fields (an
            "all versions" report); by default, when a row is not a plain latest version.

    Returns:
        The key of the report's ``manifest.json`` in ``dest_bucket``.
    """
    when = (when or datetime.now(UTC)).astimezone(UTC)
    rows = [
        o if isinstance(o, InventoryRow) else InventoryRow(o.key, o.size, o.last_modified, o.etag)
        for o in (list_objects(client, source_bucket) if objects is None else objects)
    ]
    if all_versions is None:
        all_versions = any(r.version_id or not r.is_latest or r.is_delete_marker for r in rows)
    fields = [f for f in _FIELDS if all_versions or not f[5]]
    root = "/".join(p for p in (dest_prefix.strip("/"), source_bucket, config_id) if p)
    random.Random(f"{config_id}{when.isoformat()}").shuffle(rows)  # reports are not sorted
    n_files = max(1, min(files, len(rows)))

    entries = []
    for i in range(n_files):
        chunk = rows[i::n_files]
        if fmt == "CSV":
            body = _csv_file(source_bucket, chunk, fields)
        else:
            body = _columnar_file(source_bucket, chunk, fields, fmt)
        key = f"{root}/data/{uuid.uuid4()}{_SUFFIX[fmt]}"
        client.put_object(Bucket=dest_bucket, Key=key, Body=body)
        entries.append(
            {
                "key": key,
                "size": len(body),
                "MD5checksum": hashlib.md5(body, usedforsecurity=False).hexdigest(),
            }
        )
    if fmt == "CSV":
        schema = ", ".join(f[0] for f in fields)
    elif fmt == "Parquet":
        schema = "message s3.inventory { " + " ".join(f"{f[3]};" for f in fields) + "}"
    else:
        schema = "struct<" + ",".join(f"{f[1]}:{f[4]}" for f in fields) + ">"
    manifest = {
        "sourceBucket": source_bucket,
        "destinationBucket": f"arn:aws:s3:::{dest_bucket}",
        "version": "2016-11-30",
        "creationTimestamp": str(int(when.timestamp() * 1000)),
        "fileFormat": fmt,
        "fileSchema": schema,
        "files": entries,
    }
    body = json.dumps(manifest, indent=4).encode()
    folder = f"{root}/{when:%Y-%m-%dT%H-%MZ}"
    client.put_object(Bucket=dest_bucket, Key=f"{folder}/manifest.json", Body=body)
    checksum = hashlib.md5(body, usedforsecurity=False).hexdigest().encode()
    client.put_object(Bucket=dest_bucket, Key=f"{folder}/manifest.checksum", Body=checksum)
    symlinks = "".join(f"s3://{dest_bucket}/{e['key']}\n" for e in entries).encode()
    client.put_object(
        Bucket=dest_bucket, Key=f"{root}/hive/dt={when:%Y-%m-%d-%H-%M}/symlink.txt", Body=symlinks
    )
    return f"{folder}/manifest.json"


def _values(bucket: str, row: InventoryRow) -> dict[str, Any]:
    """A row's fields by CSV name, as Python values (None: empty)."""
    deleted = row.is_delete_marker
    return {
        "Bucket": bucket,
        "Key": row.key,
        "VersionId": row.version_id or None,
        "IsLatest": row.is_latest,
        "IsDeleteMarker": deleted,
        "Size": None if deleted else row.size,
        "LastModifiedDate": row.last_modified.astimezone(UTC),
        "ETag": None if deleted or not row.etag else row.etag.strip('"'),
        "StorageClass": None if deleted else row.storage_class,
        "IsMultipartUploaded": None if deleted else "-" in (row.etag or ""),
    }


def _csv_text(name: str, value: Any) -> str:
    if value is None:
        return ""
    if name == "Key":
        return quote_plus(value, safe="/")
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"
    return str(value)


def _csv_file(bucket: str, rows: list[InventoryRow], fields: list[Any]) -> bytes:
    text = io.StringIO()
    writer = csv.writer(text, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for row in rows:
        values = _values(bucket, row)
        writer.writerow([_csv_text(f[0], values[f[0]]) for f in fields])
    return gzip.compress(text.getvalue().encode(), mtime=0)


def _columnar_file(bucket: str, rows: list[InventoryRow], fields: list[Any], fmt: str) -> bytes:
    values = [_values(bucket, row) for row in rows]
    required = {"Bucket", "Key"}
    schema = pa.schema([pa.field(f[1], f[2], nullable=f[0] not in required) for f in fields])
    table = pa.table({f[1]: [v[f[0]] for v in values] for f in fields}, schema=schema)
    out = io.BytesIO()
    if fmt == "Parquet":
        pq.write_table(table, out, compression="snappy")
    else:
        from pyarrow import orc

        # ORC timestamps carry no zone: the instants are written as UTC wall times.
        naive = pa.timestamp("ms")
        table = table.set_column(
            table.schema.get_field_index("last_modified_date"),
            "last_modified_date",
            table["last_modified_date"].cast(naive),
        )
        orc.write_table(table, out)
    return out.getvalue()
