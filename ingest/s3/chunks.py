"""Listing in chunks over key ranges, as Arrow, for a bucket of any size.

A listing is split into **shards**, contiguous key ranges listed concurrently
(``plan_shards``: boundaries among the common prefixes found with a ``/``
delimiter), and each shard is listed a **chunk** (a few pages) at a time
(``list_chunk``). S3 returns keys in UTF-8 byte order, so every chunk covers a
known key range: ``(after, last]`` for a chunk inside its shard, and up to the
shard's end for its last chunk. The change detection (``ingest.changes``)
compares exactly that range with the stored state, which also finds the keys
deleted from it; nothing holds the whole bucket in memory.

A chunk's rows are an Arrow table (``LISTING_SCHEMA``), never one Python object
per key held beyond the page being parsed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest import keys
from ingest.s3.errors import translate_errors

_TS = pa.timestamp("us", tz="UTC")
LISTING_SCHEMA = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("size", pa.int64()),
        ("last_modified", _TS),
    ]
)


@dataclass(frozen=True, slots=True)
class Shard:
    """Keys ``start <= key < end`` of the listing (None: unbounded)."""

    index: int
    start: str | None = None
    end: str | None = None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a shard's listing resumes: the continuation token and the last key listed."""

    token: str | None = None
    after: str | None = None
    chunk: int = 0


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
    found: list[str] = []
    token: str | None = None
    with translate_errors(bucket):
        while True:
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            if token:
                kwargs["ContinuationToken"] = token
            resp = client.list_objects_v2(**kwargs)
            found += [p["Prefix"] for p in resp.get("CommonPrefixes", ())]
            if not resp.get("IsTruncated") or len(found) >= 100_000:
                break
            token = resp.get("NextContinuationToken")
    found.sort(key=lambda s: s.encode())
    if len(found) < 2:
        return [Shard(0)]
    n = min(shards, len(found))
    bounds = [found[(i * len(found)) // n] for i in range(1, n)]
    edges: list[str | None] = [None, *bounds, None]
    return [Shard(i, edges[i], edges[i + 1]) for i in range(n)]


def list_chunk(
    client: Any,
    bucket: str,
    prefix: str,
    shard: Shard,
    cursor: Cursor,
    *,
    max_pages: int,
) -> Chunk:
    """List up to ``max_pages`` pages of ``shard`` from ``cursor``."""
    names: list[str] = []
    etags: list[str] = []
    sizes: list[int] = []
    modified: list[Any] = []
    token = cursor.token
    done = False
    start_after = cursor.after if cursor.after is not None else _before(shard.start)
    with translate_errors(bucket):
        for _ in range(max_pages):
            kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
            if token:
                kwargs["ContinuationToken"] = token
            elif start_after:
                kwargs["StartAfter"] = start_after
            resp = client.list_objects_v2(**kwargs)
            for item in resp.get("Contents", ()):
                key = item["Key"]
                if shard.end is not None and key.encode() >= shard.end.encode():
                    done = True
                    break
                if shard.start is not None and key.encode() < shard.start.encode():
                    continue
                names.append(key)
                etags.append(item.get("ETag", "").strip('"'))
                sizes.append(int(item.get("Size", 0)))
                modified.append(item["LastModified"])
            token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
            if done or not token:
                done = True
                break
    objects = pa.table(
        {
            "bucket": pa.array([bucket] * len(names), pa.string()),
            "key": pa.array(names, pa.string()),
            "etag": pa.array(etags, pa.string()),
            "size": pa.array(sizes, pa.int64()),
            "last_modified": pa.array(modified, _TS),
        },
        schema=LISTING_SCHEMA,
    )
    after = cursor.after if cursor.after is not None else None
    upto = None if done else (names[-1] if names else cursor.after)
    nxt = None if done else Cursor(token=token, after=upto, chunk=cursor.chunk + 1)
    return Chunk(objects, after, upto, nxt)


def _before(start: str | None) -> str | None:
    """A ``StartAfter`` that lists from ``start`` inclusive (keys below it are dropped)."""
    if not start:
        return None
    return start[:-1] or None


def filter_listing(
    objects: pa.Table, prefix: str, include: list[str], exclude: list[str]
) -> pa.Table:
    """Drop folder markers and the keys the include/exclude globs leave out."""
    if objects.num_rows == 0:
        return objects
    keep = pc.invert(pc.ends_with(objects.column("key"), "/"))
    objects = objects.filter(keep)
    if include or exclude:
        mask = [
            keys.matches_filters(keys.relative_key(k, prefix), include, exclude)
            for k in objects.column("key").to_pylist()
        ]
        objects = objects.filter(pa.array(mask, pa.bool_()))
    return objects
