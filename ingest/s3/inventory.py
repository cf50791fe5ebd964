"""An S3 Inventory report as the listing source, instead of LIST requests.

LIST returns 1,000 keys per request, one page after the other: a bucket of
hundreds of millions of objects costs hundreds of thousands of sequential
requests (hours, and a bill) before the first object is known. For such buckets
AWS recommends S3 Inventory: a daily or weekly report of every object, written
as CSV, ORC or Parquet files into a destination bucket. Reading it costs a few
GETs whatever the size of the bucket. The report is as old as its date (up to a
day or a week): objects written since are missing and objects deleted since are
listed (their GETs fail as missing objects).

Layout AWS writes into the destination bucket (``<root>`` is
``<dest-prefix>/<source-bucket>/<config-id>``)::

    <root>/YYYY-MM-DDTHH-MMZ/manifest.json     the report: format, schema, data files
    <root>/YYYY-MM-DDTHH-MMZ/manifest.checksum MD5 of manifest.json
    <root>/data/<uuid>.csv.gz|.parquet|.orc    data files (all reports share the folder)
    <root>/hive/dt=YYYY-MM-DD-HH-MM/symlink.txt

Steps, one function each:

1. ``parse_inventory_url`` and ``find_manifest``: the URL names a
   ``manifest.json``, a dated folder, a ``hive/dt=...`` folder (the dated folder
   of the same minute), or a ``<root>`` (or its ``hive/``): the newest dated
   folder that holds a ``manifest.json`` (a folder without one is a report
   still being written).
2. ``read_manifest``: ``manifest.json``, checked against ``manifest.checksum``;
   the report must carry the Size, LastModifiedDate and ETag fields.
3. ``iter_inventory``: the data files are downloaded to a work folder, each
   checked against the manifest's size and MD5, then DuckDB reads the local
   files (CSV keys are URL-decoded; old versions and delete markers of
   all-versions reports are dropped), keeps the keys under a prefix, sorts
   them in byte order like LIST and streams Arrow record batches. DuckDB sorts
   out of core (``memory_limit``, ``temp_directory`` in the work folder), so
   memory does not grow with the report.

Errors are ``TerminalError`` subclasses (a listing that cannot be trusted stops
the run): ``InventoryNotFoundError`` (no report, a missing file),
``InventoryIntegrityError`` (a file differs from its checksum even when fetched
again), ``UnsupportedInventoryError`` (a format this machine cannot read) and
``InventoryError`` (a malformed URL or manifest). Bucket-level failures go
through ``ingest.s3.translate_errors`` like the LIST path.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, cast
from urllib.parse import urlsplit

import botocore.exceptions as bce
import duckdb
import pyarrow as pa

from ingest.errors import TerminalError
from ingest.s3.errors import error_code, translate_errors
from ingest.s3.get import CHUNK, STREAM_ERRORS
from ingest.s3.listing import common_prefixes

log = logging.getLogger(__name__)

FileFormat = Literal["CSV", "ORC", "Parquet"]

# The rows iter_inventory yields: the fields of ingest.records.S3Object, in its order.
SCHEMA = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("size", pa.int64()),
        ("last_modified", pa.timestamp("us", tz="UTC")),
    ]
)

MANIFEST = "manifest.json"
CHECKSUM = "manifest.checksum"
# Inventory fields this module reads, by name with case and underscores ignored: CSV
# reports name them "LastModifiedDate", Parquet and ORC reports "last_modified_date".
REQUIRED_FIELDS = ("Bucket", "Key", "Size", "LastModifiedDate", "ETag")
_KNOWN_FIELDS = {f.lower(): f for f in (*REQUIRED_FIELDS, "IsLatest", "IsDeleteMarker")}
_DATE_DIR = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}Z")
_HIVE_DIR = re.compile(r"dt=(\d{4}-\d{2}-\d{2})-(\d{2})-(\d{2})")
_SUFFIX = {"CSV": ".csv.gz", "Parquet": ".parquet", "ORC": ".orc"}
INTEGRITY_RETRIES = 1  # a data file failing its size/MD5 check is fetched once more
STREAM_RETRIES = 2  # a body broken mid-transfer is fetched again (from the start)
_HINT_LAYOUT = (
    "point it at s3://<dest-bucket>/<dest-prefix>/<source-bucket>/<config-id>/ "
    f"or at a .../YYYY-MM-DDTHH-MMZ/{MANIFEST}"
)


class InventoryError(TerminalError):
    """The inventory URL or report cannot be used as a listing."""


class InventoryNotFoundError(InventoryError):
    """No report where the URL points, or a file the manifest names is missing."""


class InventoryIntegrityError(InventoryError):
    """A file of the report differs from its checksum, also when fetched again."""


class UnsupportedInventoryError(InventoryError):
    """A report format (or a reader of it) this installation does not have."""


@dataclass(frozen=True, slots=True)
class InventoryFile:
    """One data file of a report, as the manifest lists it."""

    key: str
    size: int
    md5: str  # hex MD5 of the whole file (the manifest's ``MD5checksum``)


@dataclass(frozen=True, slots=True)
class InventoryManifest:
    """One report: what ``manifest.json`` says, and where it was read from.

    ``columns`` are the data files' column names in ``file_schema`` order (CSV
    files have no header: this is how their columns are named).
    """

    bucket: str  # the destination bucket: the manifest's and the data files' bucket
    key: str  # of manifest.json
    source_bucket: str
    file_format: FileFormat
    file_schema: str
    files: tuple[InventoryFile, ...]
    creation_timestamp: datetime
    columns: tuple[str, ...]


# --------------------------------------------------------------------------- locating


def parse_inventory_url(url: str) -> tuple[str, str]:
    """``s3://bucket/key-or-prefix`` as ``(bucket, key_or_prefix)``.

    The path is kept as written (a trailing ``/`` included): ``find_manifest``
    decides whether it names a manifest, a dated folder or a configuration.
    """
    parts = urlsplit(url.strip())
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise InventoryError(
            f"{url!r} is not an s3://bucket/prefix URL of an S3 Inventory report ({_HINT_LAYOUT})"
        )
    return parts.netloc, parts.path.lstrip("/")


def find_manifest(client: Any, url: str) -> str:
    """The key of the ``manifest.json`` that ``url`` names, in the URL's bucket.

    Accepted, with ``<root>`` = ``<dest-prefix>/<source-bucket>/<config-id>``:
    ``.../manifest.json`` itself; a dated folder ``<root>/YYYY-MM-DDTHH-MMZ/``;
    the Hive layout ``<root>/hive/dt=YYYY-MM-DD-HH-MM/`` (or its ``symlink.txt``),
    which names the dated folder of the same minute; and ``<root>/`` or
    ``<root>/hive/``, for the newest dated folder holding a ``manifest.json``
    (AWS writes the manifest last, so a folder without one is a report in
    progress and is passed over).

    Raises:
        InventoryNotFoundError: no manifest there.
        InventoryError: the URL is not an s3:// URL.
    """
    bucket, path = parse_inventory_url(url)
    segments = [s for s in path.split("/") if s]
    if segments and segments[-1] in (MANIFEST, "symlink.txt"):
        if segments[-1] == MANIFEST:
            key = path
            if not _exists(client, bucket, key):
                raise InventoryNotFoundError(f"s3://{bucket}/{key} does not exist ({_HINT_LAYOUT})")
            return key
        segments = segments[:-1]
    if len(segments) >= 2 and segments[-2] == "hive" and _HIVE_DIR.fullmatch(segments[-1]):
        match = _HIVE_DIR.fullmatch(segments[-1])
        assert match is not None
        segments = [*segments[:-2], f"{match[1]}T{match[2]}-{match[3]}Z"]
    elif segments and segments[-1] == "hive":
        segments = segments[:-1]
    if segments and _DATE_DIR.fullmatch(segments[-1]):
        key = "/".join([*segments, MANIFEST])
        if not _exists(client, bucket, key):
            raise InventoryNotFoundError(
                f"s3://{bucket}/{key} does not exist (the report of that date is missing "
                "or still being written)"
            )
        return key
    root = "".join(s + "/" for s in segments)
    for folder in sorted(_dated_folders(client, bucket, root), reverse=True):
        key = f"{root}{folder}/{MANIFEST}"
        if _exists(client, bucket, key):
            return key
        log.info(
            "s3://%s/%s%s/ has no %s yet; trying an older report", bucket, root, folder, MANIFEST
        )
    raise InventoryNotFoundError(
        f"no S3 Inventory report under s3://{bucket}/{root}: no YYYY-MM-DDTHH-MMZ/{MANIFEST} "
        f"there ({_HINT_LAYOUT})"
    )


def _dated_folders(client: Any, bucket: str, root: str) -> Iterator[str]:
    """Names of the ``YYYY-MM-DDTHH-MMZ`` folders directly under ``root``."""
    for common in common_prefixes(client, bucket, root):
        name = common[len(root) :].rstrip("/")
        if _DATE_DIR.fullmatch(name):
            yield name


def _exists(client: Any, bucket: str, key: str) -> bool:
    with translate_errors(bucket):
        try:
            client.head_object(Bucket=bucket, Key=key)
        except bce.ClientError as exc:
            if error_code(exc) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise
    return True


@contextmanager
def _missing_as(bucket: str, key: str, what: str) -> Iterator[None]:
    """A missing key becomes InventoryNotFoundError (translate_errors would blame the bucket)."""
    with translate_errors(bucket):
        try:
            yield
        except bce.ClientError as exc:
            if error_code(exc) in ("NoSuchKey", "404"):
                raise InventoryNotFoundError(f"{what} s3://{bucket}/{key} does not exist") from exc
            raise


# --------------------------------------------------------------------------- manifest


_MD5 = re.compile(r"[0-9a-f]{32}")


def _md5_of(value: object) -> str:
    """A manifest's ``MD5checksum``: 32 hex digits, or ValueError (it names a local file)."""
    md5 = str(value).strip().lower()
    if not _MD5.fullmatch(md5):
        raise ValueError(f"MD5checksum {str(value)[:80]!r} is not 32 hex digits")
    return md5


def read_manifest(client: Any, bucket: str, key: str) -> InventoryManifest:
    """Read and check the ``manifest.json`` at ``s3://bucket/key``.

    The manifest is checked against the ``manifest.checksum`` next to it (a
    report without one is read with a warning), then validated: a known
    ``fileFormat``, and a ``fileSchema`` holding the fields a listing needs
    (Size, LastModifiedDate and ETag are optional fields of an inventory
    configuration).

    Raises:
        InventoryNotFoundError: no manifest at that key.
        InventoryIntegrityError: the manifest differs from ``manifest.checksum``.
        InventoryError: not an S3 Inventory manifest, or fields are missing.
        UnsupportedInventoryError: a format other than CSV, ORC and Parquet.
    """
    with _missing_as(bucket, key, "inventory manifest"):
        body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
    where = f"s3://{bucket}/{key}"
    checksum_key = f"{key.rpartition('/')[0]}/{CHECKSUM}" if "/" in key else CHECKSUM
    try:
        with _missing_as(bucket, checksum_key, "inventory checksum"):
            expected = client.get_object(Bucket=bucket, Key=checksum_key)["Body"].read()
    except InventoryNotFoundError:
        log.warning("%s has no %s next to it; read unchecked", where, CHECKSUM)
    else:
        actual = hashlib.md5(body, usedforsecurity=False).hexdigest()
        wanted = expected.decode("ascii", "replace").strip().lower()
        if actual != wanted:
            raise InventoryIntegrityError(
                f"{where}: MD5 {actual} differs from {CHECKSUM} {wanted!r} "
                "(the report is being rewritten or is damaged; use another report)"
            )
    try:
        doc = json.loads(body)
        fmt = _file_format(str(doc["fileFormat"]))
        schema = str(doc["fileSchema"])
        files = tuple(
            InventoryFile(key=str(f["key"]), size=int(f["size"]), md5=_md5_of(f["MD5checksum"]))
            for f in doc["files"]
        )
        created = datetime.fromtimestamp(int(doc["creationTimestamp"]) / 1000, UTC)
        source = str(doc["sourceBucket"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InventoryError(f"{where} is not an S3 Inventory manifest: {exc!r}") from exc
    columns = schema_columns(fmt, schema)
    present = {_field(c) for c in columns}
    missing = [f for f in REQUIRED_FIELDS if f not in present]
    if missing:
        raise InventoryError(
            f"{where}: the report lacks the field(s) {', '.join(missing)} (fileSchema: "
            f"{schema!r}); add them to the inventory configuration's additional fields"
        )
    return InventoryManifest(
        bucket=bucket,
        key=key,
        source_bucket=source,
        file_format=fmt,
        file_schema=schema,
        files=files,
        creation_timestamp=created,
        columns=columns,
    )


def _file_format(value: str) -> FileFormat:
    for fmt in ("CSV", "ORC", "Parquet"):
        if value.lower() == fmt.lower():
            return cast(FileFormat, fmt)
    raise UnsupportedInventoryError(
        f"inventory format {value!r} is not supported (CSV, ORC and Parquet are)"
    )


def schema_columns(fmt: FileFormat, schema: str) -> tuple[str, ...]:
    """Column names of a manifest's ``fileSchema``, in order.

    CSV: ``"Bucket, Key, Size, ..."``; Parquet: a message type
    (``message s3.inventory { required binary bucket (UTF8); ... }``); ORC: a
    struct type (``struct<bucket:string,key:string,...>``).
    """
    if fmt == "CSV":
        names = [c.strip() for c in schema.split(",")]
    elif fmt == "Parquet":
        names = re.findall(r"\b(?:required|optional|repeated)\s+\w+\s+(\w+)", schema)
    else:
        names = re.findall(r"[<,]\s*(\w+)\s*:", schema)
    return tuple(n for n in names if n)


def _field(column: str) -> str | None:
    """The inventory field a column holds (``last_modified_date`` -> ``LastModifiedDate``)."""
    return _KNOWN_FIELDS.get(column.replace("_", "").lower())


# --------------------------------------------------------------------------- data files


def _download(
    client: Any, manifest: InventoryManifest, folder: Path, concurrency: int
) -> list[Path]:
    """Each data file in ``folder``, checked against the manifest's size and MD5.

    Local names are the files' MD5s: a file is renamed to its name only once
    checked, so a file already there from an interrupted run is reused as is.
    """
    folder.mkdir(parents=True, exist_ok=True)
    suffix = _SUFFIX[manifest.file_format]
    jobs = [(f, folder / f"{f.md5}{suffix}") for f in manifest.files]
    if not jobs:
        return []
    with ThreadPoolExecutor(min(concurrency, len(jobs)), thread_name_prefix="inventory") as pool:
        return list(pool.map(lambda job: _fetch(client, manifest.bucket, *job), jobs))


def _fetch(client: Any, bucket: str, file: InventoryFile, dest: Path) -> Path:
    if dest.is_file() and dest.stat().st_size == file.size:
        return dest
    where = f"s3://{bucket}/{file.key}"
    checks = broken = 0
    while True:
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex}.part")
        try:
            problem = _fetch_once(client, bucket, file, tmp)
            if not problem:
                os.replace(tmp, dest)
                return dest
        except STREAM_ERRORS as exc:
            broken += 1
            if broken > STREAM_RETRIES:
                raise
            log.info("%s: download broken (%s); fetching again", where, exc)
            continue
        finally:
            tmp.unlink(missing_ok=True)
        checks += 1
        if checks > INTEGRITY_RETRIES:
            raise InventoryIntegrityError(
                f"{where}: {problem}, fetched {checks} times (the report is being rewritten "
                "or is damaged; use another report)"
            )
        log.info("%s: %s; fetching again", where, problem)


def _fetch_once(client: Any, bucket: str, file: InventoryFile, tmp: Path) -> str:
    """GET one data file into ``tmp``: what differs from the manifest ("" when nothing)."""
    with _missing_as(bucket, file.key, "inventory data file listed in the manifest"):
        body = client.get_object(Bucket=bucket, Key=file.key)["Body"]
    md5 = hashlib.md5(usedforsecurity=False)
    size = 0
    try:
        with open(tmp, "wb") as out:
            for chunk in body.iter_chunks(CHUNK):
                out.write(chunk)
                md5.update(chunk)
                size += len(chunk)
    except bce.FlexibleChecksumError as exc:  # botocore's CRC check of the body
        return f"checksum mismatch in transfer ({exc})"
    finally:
        body.close()
    if size != file.size:
        return f"size {size} differs from the manifest's {file.size}"
    if md5.hexdigest() != file.md5:
        return f"MD5 {md5.hexdigest()} differs from the manifest's {file.md5}"
    return ""


def _orc_as_parquet(paths: list[Path]) -> list[Path]:
    """ORC files rewritten as Parquet next to them, one stripe at a time (DuckDB has no
    ORC reader; pyarrow's needs the ORC library it may be built without)."""
    import pyarrow.parquet as pq

    orc = _orc_module()
    out = []
    for path in paths:
        dest = path.with_suffix(".orc.parquet")
        if not dest.is_file():
            tmp = dest.with_name(f".{dest.name}.{os.getpid()}-{uuid.uuid4().hex}.part")
            try:
                source = orc.ORCFile(str(path))
                with pq.ParquetWriter(str(tmp), source.schema) as writer:
                    for i in range(source.nstripes):
                        writer.write_batch(source.read_stripe(i))
                os.replace(tmp, dest)
            finally:
                tmp.unlink(missing_ok=True)
        out.append(dest)
    return out


def _orc_module() -> Any:
    try:
        import pyarrow.orc as orc
    except ImportError as exc:
        raise UnsupportedInventoryError(
            f"ORC inventory reports need pyarrow's ORC reader, absent here ({exc}); "
            "configure the inventory as CSV or Parquet"
        ) from exc
    return orc


# --------------------------------------------------------------------------- rows


def iter_inventory(
    client: Any,
    manifest: InventoryManifest,
    *,
    prefix: str = "",
    work_dir: Path,
    batch_rows: int = 10_000,
    memory_limit: str = "1GB",
    threads: int = 2,
    concurrency: int = 4,
) -> Iterator[pa.RecordBatch]:
    """The report's current objects under ``prefix``, sorted by key as LIST returns them.

    The data files are downloaded into ``work_dir/files`` (``concurrency`` at a
    time, each checked against the manifest) before the first batch; they are
    kept, so a later call on the same report reuses them: the caller owns
    ``work_dir`` and removes it. DuckDB then reads the local files (no
    extension is installed or loaded, nothing is fetched at run time) in two
    statements: the rows are decoded and filtered into a Parquet file in
    ``work_dir`` (about 75 bytes a row; removed at the end), which is then
    sorted out of core, spilling to ``work_dir/duckdb-tmp``, and streamed as
    batches, so one batch at a time is in Python. ``memory_limit`` bounds
    DuckDB's memory whatever the size of the report. Measured with 2 threads
    (peak RSS of the whole process): 96 million rows sorted in 2 min 40 s at
    ``memory_limit="1GB"`` (1.3 GB) and at 600MB (0.85 GB); 2 and 8 million
    rows at 300MB (0.55 GB both), though 8 million failed there one run in
    four. The sort needs a floor that grows slowly with the report and with
    the threads, so the limit wants headroom; a limit too low fails with
    ``InventoryError`` rather than taking the machine's memory.

    Rows: CSV keys are URL-decoded (inventory CSV encodes them as HTML forms
    do: ``+`` for a space, ``%XX`` for other bytes); in all-versions reports only
    the latest version of each key is kept and keys whose latest version is a
    delete marker are dropped; keys are sorted in UTF-8 byte order, the order of
    LIST; ETags are unquoted.

    Args:
        client: a boto3 S3 client that can read the destination bucket.
        manifest: the report, from ``read_manifest``.
        prefix: only keys starting with it (after decoding).
        work_dir: a local folder for the data files and DuckDB's spill files.
        batch_rows: rows per batch (at most).
        memory_limit: DuckDB's memory limit (``"1GB"``, ``"512MB"``).
        threads: DuckDB's threads (each one sorting needs its own share of the limit).
        concurrency: data files downloaded at a time.

    Yields:
        Record batches with the schema ``SCHEMA``.

    Raises:
        InventoryNotFoundError: a data file is missing.
        InventoryIntegrityError: a data file differs from the manifest twice.
        UnsupportedInventoryError: an ORC report without pyarrow's ORC reader.
        InventoryError: ``memory_limit`` is too low to sort the report.
    """
    if manifest.file_format == "ORC":
        _orc_module()  # fail before downloading anything
    paths = _download(client, manifest, work_dir / "files", concurrency)
    if not paths:
        return
    if manifest.file_format == "ORC":
        paths = _orc_as_parquet(paths)
    config: dict[str, str | bool | int | float | list[str]] = {
        "memory_limit": memory_limit,
        "temp_directory": str(work_dir / "duckdb-tmp"),
        "threads": threads,
        "preserve_insertion_order": False,  # the ORDER BY orders; nothing else must
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    }
    stage = work_dir / f"stage-{os.getpid()}-{uuid.uuid4().hex}.parquet"
    try:
        with duckdb.connect(config=config) as con:
            con.execute("SET TimeZone = 'UTC'")  # TIMESTAMPTZ values come out as UTC
            try:
                # Decoding and filtering first, into a local Parquet file: the CSV reader's
                # buffers and the sort then never hold memory at the same time.
                con.execute(
                    f"COPY ({_select(manifest)}) TO {_sql_str(str(stage))} (FORMAT parquet)",
                    [[str(p) for p in paths], prefix],
                )
                result = con.execute(
                    f"SELECT {', '.join(SCHEMA.names)} FROM read_parquet(?) ORDER BY key",
                    [str(stage)],
                )
                for batch in result.to_arrow_reader(batch_rows):
                    yield batch if batch.schema == SCHEMA else batch.cast(SCHEMA)
            except duckdb.OutOfMemoryException as exc:
                raise InventoryError(
                    f"sorting the inventory s3://{manifest.bucket}/{manifest.key} needs more "
                    f"memory than memory_limit={memory_limit} with threads={threads} (raise "
                    f"the limit or lower the threads): {exc}"
                ) from exc
    finally:
        stage.unlink(missing_ok=True)


def _select(manifest: InventoryManifest) -> str:
    """The rows of the local data files, decoded and filtered, unsorted; parameters: the
    list of files and the prefix."""
    col = {f: c for c in manifest.columns if (f := _field(c))}

    def ident(field: str) -> str:
        return '"' + col[field].replace('"', '""') + '"'

    if manifest.file_format == "CSV":
        columns = ", ".join(f"{_sql_str(c)}: 'VARCHAR'" for c in manifest.columns)
        source = (
            f"read_csv(?, columns = {{{columns}}}, header = false, auto_detect = false, "
            "delim = ',', quote = '\"', escape = '\"', compression = 'gzip')"
        )
        key = f"url_decode(replace({ident('Key')}, '+', ' '))"
        size = f"CAST(NULLIF({ident('Size')}, '') AS BIGINT)"
        modified = f"CAST(NULLIF({ident('LastModifiedDate')}, '') AS TIMESTAMPTZ)"
    else:  # Parquet, and ORC rewritten as Parquet
        source = "read_parquet(?)"
        key = f"CAST({ident('Key')} AS VARCHAR)"
        size = f"CAST({ident('Size')} AS BIGINT)"
        modified = f"CAST({ident('LastModifiedDate')} AS TIMESTAMPTZ)"
    where = ["TRUE"]
    if "IsLatest" in col:
        where.append(f"coalesce(TRY_CAST({ident('IsLatest')} AS BOOLEAN), true)")
    if "IsDeleteMarker" in col:
        where.append(f"NOT coalesce(TRY_CAST({ident('IsDeleteMarker')} AS BOOLEAN), false)")
    return f"""
        SELECT bucket, key, etag, size, last_modified FROM (
            SELECT
                CAST({ident("Bucket")} AS VARCHAR) AS bucket,
                {key} AS key,
                trim(CAST({ident("ETag")} AS VARCHAR), '"') AS etag,
                {size} AS size,
                {modified} AS last_modified
            FROM {source}
            WHERE {" AND ".join(where)}
        )
        WHERE starts_with(key, ?)
    """


def _sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
