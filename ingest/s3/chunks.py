"""Listing in chunks over key ranges, as Arrow, for a bucket of any size.

A listing is split into **shards**, contiguous key ranges listed concurrently
(``plan_shards``: boundaries among the common prefixes found with a ``/``
delimiter), and each shard is listed a **chunk** (a few pages) at a time
(``list_chunk``). S3 returns keys in UTF-8 byte order, so every chunk covers a
known key range: ``(after, last]`` for a chunk inside its shard, and up to the
shard's end for its last chunk. The change detection (``ingest.s3.changes``)
compares exactly that range with the stored state, which also finds the keys
deleted from it; nothing holds the whole bucket in memory.

A chunk's rows are an Arrow table (``LISTING_SCHEMA``), never one Python object
per key held beyond the page being parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ingest.records import Cursor, Shard
from ingest.s3 import inventory, keys, rawlist
from ingest.s3.changes import ListSpec
from ingest.s3.client import S3Connection
from ingest.s3.listing import common_prefixes, list_page

# The fields of ingest.records.S3Object, in its order: an inventory report's rows too.
LISTING_SCHEMA = inventory.SCHEMA
_TS = LISTING_SCHEMA.field("last_modified").type


@dataclass(slots=True)
class Chunk:
    """One chunk of a shard's listing: its rows and its key range ``(after, upto]``
    (``upto`` None with ``last`` True: up to the shard's end)."""

    objects: pa.Table
    after: str | None
    upto: str | None
    next: Cursor | None

    @property
    def last(self) -> bool:
        return self.next is None


def plan_shards(client: Any, bucket: str, prefix: str, shards: int) -> list[Shard]:
    """Split the listing of ``prefix`` into up to ``shards`` contiguous key ranges.

    Boundaries are common prefixes one ``/`` level below ``prefix`` (what a
    delimiter listing returns), spread evenly; a flat prefix stays one shard.
    """
    if shards <= 1:
        return [Shard(0)]
    found = sorted(islice(common_prefixes(client, bucket, prefix), 100_000), key=str.encode)
    if len(found) < 2:
        return [Shard(0)]
    n = min(shards, len(found))
    bounds = [found[(i * len(found)) // n] for i in range(1, n)]
    edges: list[str | None] = [None, *bounds, None]
    return [Shard(i, edges[i], edges[i + 1]) for i in range(n)]


def list_chunk(
    conn: S3Connection, spec: ListSpec, shard: Shard, cursor: Cursor, *, max_pages: int
) -> Chunk:
    """List up to ``max_pages`` pages of ``shard`` of the run's listing from ``cursor``.

    Pages go through the lean path (``rawlist``) when it answers, else botocore.
    """
    bucket, prefix = spec.bucket, spec.prefix
    pages: list[pa.Table] = []
    token = cursor.token
    done = False
    last_key: str | None = None
    start_after = cursor.after if cursor.after is not None else _before(shard.start)
    raw = conn.lister(bucket)
    end = shard.end.encode() if shard.end is not None else None
    start = shard.start.encode() if shard.start is not None else None
    for _ in range(max_pages):
        page = raw.page(prefix, token, start_after) if raw is not None else None
        if page is None:
            page = _boto_page(conn.client, bucket, prefix, token, start_after)
        names = page.keys
        cut_end = len(names)
        if end is not None:
            while cut_end and names[cut_end - 1].encode() >= end:
                cut_end -= 1
            if cut_end < len(names):
                done = True
        cut_start = 0
        if start is not None:
            while cut_start < cut_end and names[cut_start].encode() < start:
                cut_start += 1
        if cut_end > cut_start:
            last_key = names[cut_end - 1]
            pages.append(_columns(bucket, page, cut_start, cut_end))
        token = page.next_token
        if done or not token:
            done = True
            break
    objects = pa.concat_tables(pages) if pages else LISTING_SCHEMA.empty_table()
    upto = None if done else (last_key if last_key is not None else cursor.after)
    nxt = None if done else Cursor(token=token, after=upto, chunk=cursor.chunk + 1)
    return Chunk(objects, cursor.after, upto, nxt)


def _boto_page(
    client: Any, bucket: str, prefix: str, token: str | None, start_after: str | None
) -> rawlist.RawPage:
    """The same page through botocore (retries, error translation, redirects)."""
    listed = list_page(client, bucket, prefix, token, start_after)
    return rawlist.RawPage(
        keys=[o.key for o in listed.objects],
        etags=[o.etag for o in listed.objects],
        sizes=[o.size for o in listed.objects],
        modified=[o.last_modified.isoformat() for o in listed.objects],
        next_token=listed.next_token,
    )


def _columns(bucket: str, page: rawlist.RawPage, lo: int, hi: int) -> pa.Table:
    n = hi - lo
    return pa.table(
        {
            "bucket": pa.array([bucket] * n, pa.string()),
            "key": pa.array(page.keys[lo:hi], pa.string()),
            "etag": pa.array(page.etags[lo:hi], pa.string()),
            "size": pa.array(page.sizes[lo:hi], pa.int64()),
            "last_modified": pc.cast(pa.array(page.modified[lo:hi], pa.string()), _TS),
        },
        schema=LISTING_SCHEMA,
    )


def _before(start: str | None) -> str | None:
    """A ``StartAfter`` that lists from ``start`` inclusive (keys below it are dropped)."""
    if not start:
        return None
    return start[:-1] or None


def filter_listing(objects: pa.Table, spec: ListSpec) -> pa.Table:
    """Drop folder markers and the keys the run's include/exclude globs leave out."""
    if objects.num_rows == 0:
        return objects
    keep = pc.invert(pc.ends_with(objects.column("key"), "/"))
    objects = objects.filter(keep)
    if spec.include or spec.exclude:
        mask = [
            keys.matches_filters(keys.relative_key(k, spec.prefix), spec.include, spec.exclude)
            for k in objects.column("key").to_pylist()
        ]
        objects = objects.filter(pa.array(mask, pa.bool_()))
    return objects


def load_inventory(
    client: Any, url: str, bucket: str, prefix: str, work_dir: Path, *, batch_rows: int = 10_000
) -> Path:
    """Fetch an S3 Inventory report and write its rows for ``bucket``/``prefix``, sorted by
    key, to one Parquet file of ``batch_rows``-row groups: the listing the chunks read."""
    dest_bucket, _ = inventory.parse_inventory_url(url)
    manifest = inventory.read_manifest(client, dest_bucket, inventory.find_manifest(client, url))
    if manifest.source_bucket and manifest.source_bucket != bucket:
        raise inventory.InventoryError(
            f"the inventory at {url} lists bucket {manifest.source_bucket!r}, not {bucket!r}"
        )
    work_dir.mkdir(parents=True, exist_ok=True)
    target = work_dir / "listing.parquet"
    tmp = work_dir / ".listing.parquet.tmp"
    with pq.ParquetWriter(tmp, LISTING_SCHEMA, compression="zstd") as writer:
        for batch in inventory.iter_inventory(
            client, manifest, prefix=prefix, work_dir=work_dir, batch_rows=batch_rows
        ):
            writer.write_batch(batch, row_group_size=batch_rows)
    tmp.replace(target)
    return target


def inventory_chunk(listing: Path, cursor: Cursor) -> Chunk:
    """The next row group of a sorted inventory listing (``load_inventory``) as a chunk."""
    reader = pq.ParquetFile(listing)
    group = int(cursor.token or 0)
    if group >= reader.num_row_groups:
        return Chunk(LISTING_SCHEMA.empty_table(), cursor.after, None, None)
    objects = reader.read_row_group(group).cast(LISTING_SCHEMA)
    last = group + 1 >= reader.num_row_groups
    upto = None if last else objects.column("key")[-1].as_py()
    nxt = None if last else Cursor(token=str(group + 1), after=upto, chunk=cursor.chunk + 1)
    return Chunk(objects, cursor.after, upto, nxt)
