"""Renames and copies recognised from the listing: a key to fetch whose content a stored
object already has takes that object's file and extracted rows, with no GET and no parse.

The content key is the ETag with the size (an MD5 for single-part uploads; a multipart
ETag with its part count): a key the comparison (``ingest.s3.changes``) would fetch, new or
changed, whose ``(etag, size)`` a stored object of the same bucket has gets an
``s3_objects`` row with status ``copied``, and its file as the run keeps files
(``files``):

* ``local`` (files kept in a folder of this machine): the stored object's file, still
  here at its size, at the key's own local path (a hard link, else a copy); a stored
  object whose file is not here (deleted since, or on another machine's disk) is no
  source, and the key is fetched;
* ``dropped`` (files not kept, on any task runner): no file, as a fetched object of such
  a run has none (``local_path`` empty); the rows are all there is to copy;
* ``remote`` (files kept on object storage, ``s3://``): the stored object's copy there is
  copied by the store to the key's own address (``copy_remote``, a CopyObject: no GET
  here); a copy that fails leaves the key to fetch.

With extraction on, it
is copied only when the stored object's ``documents`` row is of that ETag and of the
current extractor version of its kind (``ingest.extract.provenance``); its ``documents``
row and its structured tables' rows (``ingest.extract.structure``) are copied under the
new key. Otherwise the key is fetched as before: the content key and the extractor
version decide re-extraction, not the key.

The old key of a rename is gone from the listing and becomes ``deleted`` as any deleted
key does (its file is kept, so the order of the chunks does not matter).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from ingest import storage
from ingest.s3 import keys
from ingest.s3.changes import ListingDatabase, ListSpec, _file_sizes, _versions
from ingest.s3.files import _publish, remove, temp_path
from ingest.s3.tables import S3_OBJECTS

log = logging.getLogger(__name__)

_SOURCES = ("downloaded", "skipped", "copied")

# How the run keeps files: in a local folder, not at all, or on object storage (see the
# module's text).
Files = Literal["local", "dropped", "remote"]
# Copies on object storage made at once (each one request the store serves).
REMOTE_COPIES = 16


@dataclass(slots=True)
class Copied:
    """What a chunk took from stored objects: the keys still to fetch, and the rows of
    those copied (``s3_objects``; ``documents`` and structured tables by table name)."""

    fetch: pa.Table
    objects: pa.Table
    tables: dict[str, pa.Table]

    @property
    def count(self) -> int:
        return self.objects.num_rows


def _candidates(
    db: ListingDatabase,
    fetch: pa.Table,
    *,
    bucket: str,
    state_sql: str,
    documents_sql: str | None,
    versions: pa.Table | None,
    files: Files,
) -> list[dict[str, Any]]:
    """For each key to fetch, stored objects of the same content (and, with
    ``documents_sql``, a current extraction of it), nearest key first; with ``files``
    ``local``, only those whose row names a file of a local folder."""
    wanted = fetch.select(["key", "etag", "size"])
    docs_join, docs_cond, docs_cols = "", "", ""
    if documents_sql is not None and versions is not None:
        docs_join = f"""JOIN (SELECT key, etag, kind, extractor_version, extracted_at
                             FROM {documents_sql} WHERE bucket = $bucket
                               AND status <> 'deleted') d
                          ON d.key = s.key AND d.etag = s.etag
                        LEFT JOIN versions v ON v.kind = d.kind"""
        docs_cond = """AND d.extractor_version IS NOT DISTINCT FROM coalesce(
                          v.version, (SELECT version FROM versions WHERE kind = ''))"""
        docs_cols = ", d.extracted_at AS src_extracted_at"
    path_cond = ""
    if files == "local":
        path_cond = "AND local_path IS NOT NULL AND NOT starts_with(local_path, 's3://')"
    elif files == "remote":
        path_cond = "AND starts_with(local_path, 's3://')"
    with db.cursor() as con:
        con.register("wanted", wanted)
        if versions is not None:
            con.register("versions", versions)
        found = con.execute(
            f"""SELECT w.key, s.key AS src_key, s.local_path AS src_path {docs_cols}
                FROM wanted w
                JOIN (SELECT key, etag, size, local_path FROM {state_sql}
                      WHERE bucket = $bucket AND status IN {_SOURCES} {path_cond}
                     ) s ON s.etag = w.etag AND s.size = w.size AND s.key <> w.key
                {docs_join}
                WHERE w.etag <> '' {docs_cond}
                ORDER BY w.key, s.key""",
            {"bucket": bucket},
        ).fetch_arrow_table()
    return found.to_pylist()


def take_stored(
    db: ListingDatabase,
    fetch: pa.Table,
    spec: ListSpec,
    *,
    root: str,
    state_sql: str,
    documents_sql: str | None = None,
    claims: keys.PathClaims | None = None,
    table_sql: dict[str, str] | None = None,
    files: Files = "local",
    copy_remote: Callable[[str, str], str] | None = None,
) -> Copied:
    """Give the keys of ``fetch`` (listed for the run's ``spec``) whose content is stored
    their rows, and their file as ``files`` says; the rest stay to fetch. ``documents_sql``
    (extraction on): only objects with a current extraction are copied, with their
    ``documents`` rows and the structured tables' rows (``table_sql``: table name -> scan
    expression of those present). ``copy_remote(src, key)`` (``files`` ``remote``): copies
    the stored copy at ``src`` to ``key``'s address on object storage and returns that
    address."""
    empty = Copied(fetch, S3_OBJECTS.empty_table(), {})
    if fetch.num_rows == 0:
        return empty
    bucket, prefix, run_id = spec.bucket, spec.prefix, spec.run_id
    versions = _versions(spec.extract_version) if spec.extract_version else None
    found = _candidates(
        db,
        fetch,
        bucket=bucket,
        state_sql=state_sql,
        documents_sql=documents_sql,
        versions=versions,
        files=files,
    )
    if not found:
        return empty
    chosen: dict[str, dict[str, Any]] = {}
    if files == "local":
        listed = zip(fetch.column("key").to_pylist(), fetch.column("size").to_pylist(), strict=True)
        sizes = dict(listed)
        on_disk = _file_sizes([c["src_path"] for c in found])
        for cand, size in zip(found, on_disk, strict=True):
            if cand["key"] not in chosen and size == sizes[cand["key"]]:
                chosen[cand["key"]] = cand
    else:
        for cand in found:
            chosen.setdefault(cand["key"], cand)
    now = datetime.now(UTC)
    done: dict[str, tuple[str | None, float]] = {}  # key -> (local path, seconds)
    for key, cand in chosen.items():
        started = time.perf_counter()
        try:
            dest = keys.local_path_for(key, prefix, root)
        except Exception:  # a key without a local path: the download makes its error row
            continue
        if files != "local":
            done[key] = (None, 0.0)
            continue
        if claims is not None and claims.claim(dest, key) is not None:
            continue  # another key has the path: the download makes the failed row
        try:
            _place(cand["src_path"], dest, root)
        except OSError as exc:
            log.info("s3://%s/%s: not copied from %s (%s)", bucket, key, cand["src_key"], exc)
            continue
        done[key] = (dest, time.perf_counter() - started)
    if files == "remote":
        done = _copy_remote(done, chosen, copy_remote, bucket)
    if not done:
        return empty
    mask = pc.is_in(fetch.column("key"), pa.array(list(done), pa.string()))
    copied, rest = fetch.filter(mask), fetch.filter(pc.invert(mask))
    n = copied.num_rows
    names = copied.column("key").to_pylist()
    objects = pa.table(
        {
            "bucket": pa.array([bucket] * n, pa.string()),
            "key": copied.column("key"),
            "etag": copied.column("etag"),
            "size": copied.column("size"),
            "last_modified": copied.column("last_modified"),
            "local_path": pa.array([done[k][0] for k in names], pa.string()),
            "status": pa.array(["copied"] * n, pa.string()),
            "error": pa.nulls(n, pa.string()),
            "attempts": pa.array([0] * n, pa.int32()),
            "seconds": pa.array([round(done[k][1], 6) for k in names], pa.float64()),
            "run_id": pa.array([run_id] * n, pa.string()),
            "ingested_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        },
        schema=S3_OBJECTS,
    )
    tables: dict[str, pa.Table] = {}
    if documents_sql is not None:
        pairs = pa.table(
            {
                "key": pa.array(names, pa.string()),
                "src_key": pa.array([chosen[k]["src_key"] for k in names], pa.string()),
                "etag": copied.column("etag"),
                "src_extracted_at": pa.array(
                    [chosen[k]["src_extracted_at"] for k in names], pa.timestamp("us", tz="UTC")
                ),
            }
        )
        for table, sql in {"documents": documents_sql, **(table_sql or {})}.items():
            rows = _copy_rows(db, table, sql, pairs, bucket, run_id, now)
            if rows.num_rows:
                tables[table] = rows
    return Copied(rest, objects, tables)


def _copy_remote(
    keys_: dict[str, tuple[str | None, float]],
    chosen: dict[str, dict[str, Any]],
    copy_remote: Callable[[str, str], str] | None,
    bucket: str,
) -> dict[str, tuple[str | None, float]]:
    """The keys whose stored copy on object storage was copied to their own address, with
    that address; a copy that fails is logged and its key left to fetch."""
    if copy_remote is None or not keys_:
        return {}

    def one(key: str) -> tuple[str, str | None, float]:
        started = time.perf_counter()
        try:
            return key, copy_remote(chosen[key]["src_path"], key), time.perf_counter() - started
        except Exception as exc:  # this object's copy only: it is fetched instead
            log.info("s3://%s/%s: not copied on object storage (%s)", bucket, key, exc)
            return key, None, 0.0

    with ThreadPoolExecutor(min(REMOTE_COPIES, len(keys_))) as pool:
        made = list(pool.map(one, keys_))
    return {key: (dest, seconds) for key, dest, seconds in made if dest is not None}


def _place(src: str, dest: str, root: str) -> None:
    """The file at ``src`` also at ``dest``: a hard link, else a copy, published whole."""
    tmp = temp_path(root)
    try:
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
        _publish(tmp, dest)
    except BaseException:
        remove(tmp)
        raise


def _copy_rows(
    db: ListingDatabase,
    table: str,
    sql: str,
    pairs: pa.Table,
    bucket: str,
    run_id: str,
    now: datetime,
) -> pa.Table:
    """The current rows of ``table`` of each source key, under its new key, this run and
    this time (the same extraction time in every table, as ``structure.CURRENT`` joins)."""
    schema = storage.SCHEMAS[table]
    current = "t.status IS DISTINCT FROM 'deleted' AND t.extracted_at = p.src_extracted_at"
    with db.cursor() as con:
        con.register("pairs", pairs)
        found = con.execute(
            f"""SELECT t.* REPLACE (p.key AS key, ? AS run_id, ? AS extracted_at)
                FROM {sql} t JOIN pairs p ON t.key = p.src_key AND t.etag = p.etag
                WHERE t.bucket = ? AND {current}""",
            [run_id, now, bucket],
        ).fetch_arrow_table()
        con.unregister("pairs")
    if table == "document_chunks" and found.num_rows:
        from ingest.extract.chunks import chunk_id

        # The id names the key: computed again for the new one (from five columns, not
        # from whole rows: the text stays in Arrow).
        columns = ("bucket", "key", "etag", "page_start", "start", "end")
        ids = [
            chunk_id(*values)
            for values in zip(*(found.column(c).to_pylist() for c in columns), strict=True)
        ]
        at = found.schema.get_field_index("chunk_id")
        found = found.set_column(at, "chunk_id", pa.array(ids, pa.string()))
    if set(schema.names) <= set(found.column_names):
        return found.select(schema.names).cast(schema)
    return pa.Table.from_pylist(found.to_pylist(), schema=schema)  # a column added since
