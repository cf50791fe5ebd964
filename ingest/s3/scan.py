"""Listing chunks and what changed in them: the plain functions under the
``list-objects`` and ``find-changes`` tasks.

``list_part`` lists one chunk (a few pages, or a row group of an inventory
report); ``find_changes`` compares it with the stored state, stages the
deletions and cuts the changed objects into batches for the download tasks.
Two tasks, so that the next chunk is listed while this one is compared: the
listing, the part that waits on the network, never waits for the rest. What
either returns is bounded by the chunk, whatever the bucket's size; the stored
state is read per key range (``ingest.s3.changes``), never loaded whole.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.feather as feather

from ingest import storage
from ingest.extract.tables import DOCUMENTS
from ingest.records import ChunkResult, Downloads, ListedChunk, ObjectBatch
from ingest.s3 import S3Connection, changes, chunks, keys, renames
from ingest.s3.changes import ListSpec
from ingest.s3.tables import S3_OBJECTS
from ingest.settings import S3Settings
from ingest.storage.location import DataDir, LakeLocation

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class S3Run:
    """What the S3 source's listing and comparison read of a run's settings, built once
    by the run's context (``ingest.context.RunContext.s3_run``): the lake, bound to the
    run's session; the S3 group; where downloads go; and the task runner (``thread``:
    the batches' files are on this machine)."""

    lake: LakeLocation
    s3: S3Settings
    downloads: Downloads
    task_runner: str = "thread"


def inventory_dir(data_dir: DataDir, run_id: str) -> Path:
    """Where a run keeps its inventory listing (removed with the run's staging)."""
    return storage.staging.run_dir(data_dir, run_id) / "_inventory"


def plan(conn: S3Connection, run: S3Run, spec: ListSpec) -> list[chunks.Shard]:
    """The shards of the run's listing: key ranges listed concurrently, or one shard over
    the inventory report's rows, fetched and sorted here once."""
    if spec.inventory:
        chunks.load_inventory(
            conn.client,
            spec.inventory,
            spec.bucket,
            spec.prefix,
            inventory_dir(run.lake, spec.run_id),
        )
        return [chunks.Shard(0)]
    return chunks.plan_shards(conn.client, spec.bucket, spec.prefix, run.s3.list_shards)


def _scan(db: changes.ListingDatabase, data_dir: DataDir, table: str) -> str:
    """``storage.scan`` resolved once per run (``db`` is the run's) and table: the state
    is only written by the run's commit at its end, so its files do not change under the
    run's chunks."""
    return db.once((str(data_dir), table), lambda: storage.scan(data_dir, table))


def chunk_pages(run: S3Run, spec: ListSpec, chunk: int, db: changes.ListingDatabase) -> int:
    """Pages of a shard's chunk ``chunk``: ``s3_list_chunk_pages``, but on a first
    listing (nothing stored under the prefix yet, or a full refresh: most objects will
    be fetched) the first chunks are smaller, 2, 4, 8 ... pages, so that downloads start
    early. A night with stored state starts at the full size: the smaller chunks cost
    tasks (a listing, a comparison and a batch each) and fetched little (a 1 % night at
    50,000 objects in 4 shards, with chunks of 10 pages: 12 chunks instead of 8, and
    2.26 s of the client's CPU for its body against 1.97 s, 8 alternating runs)."""
    full = run.s3.list_chunk_pages
    if 2 ** (chunk + 1) >= full:
        return full
    first = db.once(
        (str(run.lake), "first listing"),
        lambda: spec.full_refresh or not _stored_any(db, run.lake, spec),
    )
    return min(full, 2 ** (chunk + 1)) if first else full


def _stored_any(db: changes.ListingDatabase, data_dir: DataDir, spec: ListSpec) -> bool:
    """Whether the stored state holds an object of the bucket under the prefix."""
    with db.cursor() as con:
        found = con.execute(
            f"""SELECT 1 FROM {_scan(db, data_dir, "s3_objects")}
                WHERE bucket = ? AND starts_with(key, ?) AND status <> 'deleted' LIMIT 1""",
            [spec.bucket, spec.prefix],
        ).fetchone()
    return found is not None


def list_part(
    conn: S3Connection,
    db: changes.ListingDatabase,
    run: S3Run,
    spec: ListSpec,
    shard: chunks.Shard,
    cursor: chunks.Cursor,
) -> ListedChunk:
    """List the chunk at ``cursor`` (LIST pages or inventory rows), filtered; ``db``: the
    run's listing database (whether anything is stored yet sizes the first chunks)."""
    if spec.inventory:
        listing = inventory_dir(run.lake, spec.run_id) / "listing.parquet"
        chunk = chunks.inventory_chunk(listing, cursor)
    else:
        pages = chunk_pages(run, spec, cursor.chunk, db)
        chunk = chunks.list_chunk(conn, spec, shard, cursor, max_pages=pages)
    listed = chunks.filter_listing(chunk.objects, spec)
    name = f"s{shard.index:03d}-c{cursor.chunk:06d}"
    path = listing_path(run.lake, spec.run_id, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    # Arrow IPC, not Parquet: read back once by find-changes, then dropped with the
    # staging; writing and reading it costs ~0.1 ms a page against ~2.5 ms as Parquet.
    feather.write_feather(listed, tmp, compression="lz4")
    tmp.replace(path)
    return ListedChunk(
        shard=shard,
        chunk=cursor.chunk,
        name=name,
        count=listed.num_rows,
        after=chunk.after,
        upto=chunk.upto,
        next=chunk.next,
    )


def listing_path(data_dir: DataDir, run_id: str, name: str) -> Path:
    """A listed chunk in the run's staging (removed with it when the run ends)."""
    return storage.staging.run_dir(data_dir, run_id) / "_listing" / f"{name}.arrow"


def find_changes(
    db: changes.ListingDatabase,
    run: S3Run,
    spec: ListSpec,
    listed: ListedChunk,
    claims: keys.RunClaims | None = None,
    connect: Callable[[], Any] | None = None,
) -> ChunkResult:
    """Sort a listed chunk's objects by what the run must do: batches to fetch and to
    extract, deletions (staged here), objects whose content is stored under another key
    (copied here, ``ingest.s3.renames``), and counts; compared in ``db``, the run's listing
    database. ``claims``: the local paths the run gave out (its context's); ``connect``: the
    source's S3 client, asked for only to copy stored copies on object storage."""
    shard = listed.shard
    objects = feather.read_table(listing_path(run.lake, spec.run_id, listed.name))
    found = changes.diff_chunk(
        objects,
        spec,
        listed,
        db=db,
        state_sql=_scan(db, run.lake, "s3_objects"),
        documents_sql=(
            _scan(db, run.lake, "documents") if spec.extract_version is not None else None
        ),
        local_files=run.task_runner == "thread",
    )
    name = listed.name
    result = ChunkResult(shard=shard.index, listed=objects.num_rows, next=listed.next)
    if found.unchanged:
        result.counts["skipped"] = found.unchanged
        if spec.extract_version:
            result.extract_unchanged = found.unchanged - found.extract.num_rows
    if found.known_failed:  # failed for good before, unchanged since: not tried again
        result.counts["failed before"] = found.known_failed
    if found.reasons:
        log.info(
            "extracting %d unchanged objects again: %s",
            found.extract.num_rows,
            ", ".join(f"{why}: {n}" for why, n in sorted(found.reasons.items())),
        )
        result.reextract = dict(found.reasons)
    if found.deleted.num_rows:
        storage.stage(
            run.lake,
            spec.run_id,
            "s3_objects",
            f"deleted-{name}",
            deleted_rows(found.deleted, spec),
        )
        result.counts["deleted"] = found.deleted.num_rows
        gone = deleted_documents(db, _scan(db, run.lake, "documents"), found.deleted, spec)
        if gone.num_rows:
            storage.stage(run.lake, spec.run_id, "documents", f"deleted-{name}", gone)
            mark_structure(db, run, spec, gone.column("key").to_pylist(), name)
    fetch = found.fetch
    if fetch.num_rows and not spec.full_refresh and not spec.inventory:
        copied = copy_stored(db, run, spec, fetch, name, claims, connect)
        if copied:
            result.counts["copied"] = copied.count
            fetch = copied.fetch
    size = run.s3.batch_size
    result.fetch = [
        ObjectBatch.from_table(f"{name}-b{i // size:04d}", fetch.slice(i, size))
        for i in range(0, fetch.num_rows, size)
    ]
    result.extract = [
        ObjectBatch.from_table(f"{name}-x{i // size:04d}", found.extract.slice(i, size))
        for i in range(0, found.extract.num_rows, size)
    ]
    return result


def copy_stored(
    db: changes.ListingDatabase,
    run: S3Run,
    spec: ListSpec,
    fetch: pa.Table,
    name: str,
    claims: keys.RunClaims | None,
    connect: Callable[[], Any] | None = None,
) -> renames.Copied | None:
    """Give the chunk's keys to fetch whose content is stored under another key that
    object's rows, and its file where the run keeps files in a local folder
    (``ingest.s3.renames``), staged here as parts ``copied-<name>``; None when none was.

    On every task runner: this runs in the flow's process, where a stored file in a local
    folder counts only if it is here (on a Dask worker's own disk it is not, and the key
    is fetched). Files kept on object storage (``s3_download_dir`` an ``s3://`` address):
    the stored copy there is copied by the store to the key's own address, through the
    client ``connect`` gives (the source's, as the downloads' copies are written); without
    ``connect`` those keys are fetched."""
    files: renames.Files
    copy_remote = None
    if run.downloads.stay_local:
        files = "local"
    elif not run.downloads.keep:
        files = "dropped"
    elif connect is not None and run.downloads.url is not None:
        files = "remote"
        copy_remote = _remote_copier(connect, run.downloads.url, spec.prefix)
    else:
        return None
    from ingest.extract import structure

    loc = run.lake
    root = run.downloads.root(spec.bucket)
    extract = spec.extract_version is not None
    present: set[str] = db.once(
        (str(loc), "tables present"), lambda: set(storage.lake.tables_present(loc))
    )
    if "s3_objects" not in present or (extract and "documents" not in present):
        return None  # nothing stored, or nothing extracted yet to copy without a parse
    copied = renames.take_stored(
        db,
        fetch,
        spec,
        root=str(root),
        state_sql=_scan(db, loc, "s3_objects"),
        documents_sql=_scan(db, loc, "documents") if extract else None,
        claims=claims.for_root(root, run.s3.refuse_folded_collisions) if claims else None,
        table_sql={t: _scan(db, loc, t) for t in structure.TABLES if t in present and extract},
        files=files,
        copy_remote=copy_remote,
    )
    if not copied.count:
        return None
    storage.stage(loc, spec.run_id, "s3_objects", f"copied-{name}", copied.objects)
    for table, rows in copied.tables.items():
        storage.stage(loc, spec.run_id, table, f"copied-{name}", rows)
    log.info("%d objects copied from stored objects of the same content", copied.count)
    return copied


def _remote_copier(connect: Callable[[], Any], url: str, prefix: str) -> Callable[[str, str], str]:
    """A function copying a stored copy (``s3://bucket/key``) on object storage to the
    address of ``key`` under the destination ``url``, by one CopyObject; the new address."""
    from ingest.s3.fetch import destination_of

    def copy(src: str, key: str) -> str:
        src_bucket, _, src_key = src.removeprefix("s3://").partition("/")
        dest_bucket, dest_key = destination_of(url, key, prefix)
        connect().copy_object(
            Bucket=dest_bucket, Key=dest_key, CopySource={"Bucket": src_bucket, "Key": src_key}
        )
        return f"s3://{dest_bucket}/{dest_key}"

    return copy


def mark_structure(
    db: changes.ListingDatabase, run: S3Run, spec: ListSpec, keys: list[str], name: str
) -> None:
    """Stage the structured tables' rows of deleted objects, marked ``deleted``."""
    from ingest.extract import structure

    present = set(storage.lake.tables_present(run.lake))
    for table in structure.TABLES:
        if table not in present:
            continue
        marked = structure.deleted_rows(
            _scan(db, run.lake, table), table, keys, spec.bucket, spec.run_id, db=db
        )
        if marked.num_rows:
            storage.stage(run.lake, spec.run_id, table, f"deleted-{name}", marked)


def deleted_documents(
    db: changes.ListingDatabase, documents_sql: str, deleted: pa.Table, spec: ListSpec
) -> pa.Table:
    """``documents`` rows marking the extracted documents of deleted objects ``deleted``:
    their text goes (search drops them; ``document_log`` keeps what they said), their kind
    and etag stay. Objects never extracted get no row."""
    with db.cursor() as con:  # the run's comparing database: no connection per chunk
        con.register("gone", deleted.select(["key"]))
        rows = con.execute(
            f"""SELECT bucket, key, etag, kind, 'deleted' AS status, ? AS run_id,
                       ? AS extracted_at, extractor_version
                FROM {documents_sql} d
                WHERE bucket = ? AND status <> 'deleted' AND key IN (SELECT key FROM gone)""",
            [spec.run_id, datetime.now(UTC), spec.bucket],
        ).fetch_arrow_table()
    return pa.Table.from_pylist(rows.to_pylist(), schema=DOCUMENTS)


def deleted_rows(deleted: pa.Table, spec: ListSpec) -> pa.Table:
    """``s3_objects`` rows marking keys gone from the listing; their files are kept."""
    n = deleted.num_rows
    now = datetime.now(UTC)
    return pa.table(
        {
            "bucket": pa.array([spec.bucket] * n, pa.string()),
            "key": deleted.column("key"),
            "etag": deleted.column("etag"),
            "size": deleted.column("size"),
            "last_modified": pa.nulls(n, pa.timestamp("us", tz="UTC")),
            "local_path": deleted.column("local_path"),
            "status": pa.array(["deleted"] * n, pa.string()),
            "error": pa.nulls(n, pa.string()),
            "attempts": pa.array([0] * n, pa.int32()),
            "seconds": pa.array([0.0] * n, pa.float64()),
            "run_id": pa.array([spec.run_id] * n, pa.string()),
            "ingested_at": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        },
        schema=S3_OBJECTS,
    )
