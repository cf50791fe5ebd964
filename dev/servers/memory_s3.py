"""An in-memory S3-compatible HTTP server for benchmarks at scale.

moto's server (``dev.servers.s3``) costs ~2.5 ms of CPU per GET and its
listings are O(n) per page, so past a few thousand objects a benchmark
measures moto rather than its client. This server keeps, per bucket, the keys
in a sorted list (``bisect`` finds a key or a page start in O(log n)) and the
per-key metadata in compact arrays (generation, size, last-modified second,
MD5). The bodies of seeded objects are not stored: each is generated from its
key, its size and a per-key *generation* counter, so the server holds a
million ~2 KB objects in ~140 MB of RSS (seeded in ~5-7 s), and changing an
object is bumping its generation (new body, new ETag, a later LastModified).
Objects written by PutObject keep their bodies. Seeded keys are
``<prefix>dNNNN/obj-NNNNNNNN.bin``, 1,000 to a folder.

What it answers, path-style (``http://host:port/bucket/key``; a
``bucket.localhost`` host is also understood), as S3 does (XML bodies, error
codes, headers), with any SigV4 ``Authorization`` accepted and ignored:

* ListBuckets, CreateBucket, HeadBucket (``x-amz-bucket-region``),
  DeleteBucket, GetBucketLocation;
* ListObjectsV2 (``prefix``, ``delimiter`` with ``CommonPrefixes``,
  ``max-keys`` up to 1000, ``continuation-token``, ``start-after``,
  ``encoding-type=url``, ``fetch-owner``) and ListObjects v1 (``marker``,
  ``NextMarker`` with a delimiter);
* GetObject and HeadObject: ``Range`` (206 + ``Content-Range``; 416
  ``InvalidRange``), ``If-Match`` / ``If-Unmodified-Since`` (412
  ``PreconditionFailed``), ``If-None-Match`` / ``If-Modified-Since`` (304),
  ``ETag`` (MD5 hex of the body), ``Last-Modified``, ``Content-Length``,
  ``response-*`` overrides; 404 ``NoSuchKey`` / ``NoSuchBucket``;
* PutObject (``Content-MD5`` checked, ``aws-chunked`` and chunked bodies,
  ``x-amz-meta-*``, ``If-None-Match: *``), DeleteObject, DeleteObjects.

Anything else (multipart uploads, copies, versioning, ACLs ...) gets
501 ``NotImplemented``.

The HTTP server is a raw ``asyncio.Protocol`` with a minimal HTTP/1.1 parser
(keep-alive, pipelining, Content-Length and chunked bodies, ``Expect:
100-continue``): measured against uvicorn (h11, the only HTTP parser uvicorn
has in this environment) and aiohttp's server on the same handler, it serves
the most requests per CPU second (benchmarks/README.md). The added latency
per request (``--latency-ms``, like ``tc netem``) is a loop timer
(``call_later``, the mechanism under ``asyncio.sleep``): the answer is
computed when the request arrives and sent when the timer fires, in order,
at no CPU cost while waiting.

Control endpoints (JSON, no latency): ``GET /_dev/stats`` (requests by kind:
``GET object``, ``HEAD object``, ``LIST`` ...), ``POST /_dev/reset``,
``POST /_dev/seed`` (``{"bucket", "count", "prefix", "size"}``: N generated
objects in one call), ``POST /_dev/mutate`` (``{"bucket", "change", "delete",
"add", "prefix", "seed", "return_keys"}``, percentages of the keys under the
prefix),
``POST /_dev/drop`` (``{"bucket"}``), ``POST /_dev/latency`` (``{"ms"}``),
``GET /_dev/info`` (objects, bytes, memory of the server).

Run ``python -m dev.servers.memory_s3 --port 5000`` or use ``MemoryS3`` as a
context manager.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import ctypes
import hashlib
import json
import os
import random
import sys
import time
import traceback
import urllib.request
from array import array
from bisect import bisect_left, bisect_right
from collections import Counter, deque
from collections.abc import Callable, Iterable
from email.utils import formatdate, parsedate_to_datetime
from functools import lru_cache
from typing import Any, NamedTuple
from urllib.parse import parse_qsl, quote_plus, unquote
from xml.etree import ElementTree

from dev.servers.child import ChildServer, free_port

__all__ = ["MemoryS3", "S3App", "free_port", "serve"]

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
XML_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n'
REGION = "us-east-1"
OWNER_ID = "6d656d6f72792d73332d6f776e65722d69642d30303030303030303030303030"
OWNER_NAME = "memory-s3"
MAX_KEYS = 1000
DEFAULT_SIZE = 2048
PER_FOLDER = 1000  # seeded keys per "folder" (d0000/, d0001/ ...)
DEFAULT_TYPE = "binary/octet-stream"
MAX_HEAD = 64 * 1024

REASONS = {
    100: "Continue",
    200: "OK",
    204: "No Content",
    206: "Partial Content",
    304: "Not Modified",
    400: "Bad Request",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    412: "Precondition Failed",
    416: "Requested Range Not Satisfiable",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
}

# Sub-resources this server does not implement (bucket or object level): 501, as a
# client would rather hear than a listing or an object it did not ask for.
_UNSUPPORTED = """accelerate acl analytics attributes cors encryption intelligent-tiering
inventory legal-hold lifecycle logging metadataTable metrics notification object-lock
ownershipControls partNumber policy policyStatus publicAccessBlock replication requestPayment
restore retention select session tagging torrent uploadId uploads versionId versioning
versions website"""
UNSUPPORTED = frozenset(_UNSUPPORTED.split())
RESPONSE_OVERRIDES = {
    "response-cache-control": "Cache-Control",
    "response-content-disposition": "Content-Disposition",
    "response-content-encoding": "Content-Encoding",
    "response-content-language": "Content-Language",
    "response-content-type": "Content-Type",
    "response-expires": "Expires",
}


# ---------------------------------------------------------------------------- objects


def pattern(key: str, gen: int) -> bytes:
    """64 bytes that the body of a generated object repeats."""
    return hashlib.blake2b(f"{key}\x00{gen}".encode(), digest_size=64).digest()


def generated_size(pat: bytes, mean: int) -> int:
    """A size within +-25 % of ``mean``, fixed by the object's pattern."""
    spread = mean // 2
    return mean - mean // 4 + int.from_bytes(pat[:4], "big") % (spread + 1) if spread else mean


def generated_body(pat: bytes, size: int) -> bytes:
    return (pat * (size // 64 + 1))[:size]


def successor(prefix: str) -> str:
    """The least string greater than every string starting with ``prefix``."""
    while prefix and prefix[-1] == "\U0010ffff":
        prefix = prefix[:-1]
    return prefix[:-1] + chr(ord(prefix[-1]) + 1) if prefix else "\U0010ffff"


class Columns(NamedTuple):
    """New objects as parallel columns, sorted by key."""

    keys: list[str]
    gens: array[int]
    sizes: array[int]
    mtimes: array[int]
    md5s: bytearray


class Bucket:
    """Keys sorted (S3 lists in UTF-8 binary order, which is code-point order), with
    parallel arrays; bodies only for objects written by PutObject."""

    def __init__(self, name: str, created: float) -> None:
        self.name = name
        self.created = created
        self.keys: list[str] = []
        self.gens = array("I")
        self.sizes = array("Q")
        self.mtimes = array("I")
        self.md5s = bytearray()  # 16 bytes per key
        self.bodies: dict[str, bytes] = {}  # PutObject bodies
        self.meta: dict[str, list[tuple[str, str]]] = {}  # Content-Type, x-amz-meta-*
        self.seeded: dict[str, list[int]] = {}  # prefix -> [per folder count, mean size, next]

    def __len__(self) -> int:
        return len(self.keys)

    def index(self, key: str) -> int:
        i = bisect_left(self.keys, key)
        return i if i < len(self.keys) and self.keys[i] == key else -1

    def etag(self, i: int) -> str:
        return self.md5s[16 * i : 16 * i + 16].hex()

    def body(self, i: int) -> bytes:
        key = self.keys[i]
        stored = self.bodies.get(key)
        if stored is not None:
            return stored
        return generated_body(pattern(key, self.gens[i]), self.sizes[i])

    def total_bytes(self) -> int:
        return sum(self.sizes)

    # -- writes

    def put(self, key: str, data: bytes, meta: list[tuple[str, str]], now: int) -> str:
        digest = hashlib.md5(data).digest()
        i = bisect_left(self.keys, key)
        if i < len(self.keys) and self.keys[i] == key:
            self.gens[i] += 1
            self.sizes[i] = len(data)
            self.mtimes[i] = max(now, self.mtimes[i])
            self.md5s[16 * i : 16 * i + 16] = digest
        else:
            self.keys.insert(i, key)
            self.gens.insert(i, 0)
            self.sizes.insert(i, len(data))
            self.mtimes.insert(i, now)
            self.md5s[16 * i : 16 * i] = digest
        self.bodies[key] = data
        if meta:
            self.meta[key] = meta
        else:
            self.meta.pop(key, None)
        return digest.hex()

    def remove(self, i: int) -> None:
        key = self.keys.pop(i)
        del self.gens[i], self.sizes[i], self.mtimes[i]
        del self.md5s[16 * i : 16 * i + 16]
        self.bodies.pop(key, None)
        self.meta.pop(key, None)

    def insert_sorted(self, new: Columns) -> None:
        """Merge ``new`` (sorted, keys absent) in, copying runs as slices (C speed)."""
        count = len(new.keys)
        if not count:
            return
        old = self.keys
        keys: list[str] = []
        gens, sizes, mtimes, md5s = array("I"), array("Q"), array("I"), bytearray()
        prev = j = 0
        while j < count:
            at = bisect_left(old, new.keys[j], prev)
            # the run of new keys that all sort before old[at]
            k = bisect_left(new.keys, old[at], j + 1) if at < len(old) else count
            keys += old[prev:at]
            gens += self.gens[prev:at]
            sizes += self.sizes[prev:at]
            mtimes += self.mtimes[prev:at]
            md5s += self.md5s[16 * prev : 16 * at]
            keys += new.keys[j:k]
            gens += new.gens[j:k]
            sizes += new.sizes[j:k]
            mtimes += new.mtimes[j:k]
            md5s += new.md5s[16 * j : 16 * k]
            prev, j = at, k
        keys += old[prev:]
        gens += self.gens[prev:]
        sizes += self.sizes[prev:]
        mtimes += self.mtimes[prev:]
        md5s += self.md5s[16 * prev :]
        self.keys, self.gens, self.sizes, self.mtimes, self.md5s = keys, gens, sizes, mtimes, md5s

    def remove_many(self, positions: Iterable[int]) -> None:
        """Delete the keys at ``positions`` (any order) in one pass."""
        drop = sorted(set(positions))
        if not drop:
            return
        keys: list[str] = []
        gens, sizes, mtimes, md5s = array("I"), array("Q"), array("I"), bytearray()
        prev = 0
        for at in [*drop, len(self.keys)]:
            keys += self.keys[prev:at]
            gens += self.gens[prev:at]
            sizes += self.sizes[prev:at]
            mtimes += self.mtimes[prev:at]
            md5s += self.md5s[16 * prev : 16 * at]
            prev = at + 1
        for at in drop:
            self.bodies.pop(self.keys[at], None)
            self.meta.pop(self.keys[at], None)
        self.keys, self.gens, self.sizes, self.mtimes, self.md5s = keys, gens, sizes, mtimes, md5s

    # -- bulk admin

    def _generate(self, prefix: str, count: int, now: int) -> tuple[Columns, int]:
        """``count`` new generated objects under ``prefix``, numbered on from the last.

        The keys are built first, with nothing else allocated in between, so that the
        temporary objects of the loop below free whole memory arenas when they go."""
        per_folder, mean, nxt = self.seeded[prefix]
        self.seeded[prefix][2] = nxt + count
        keys = [
            f"{prefix}d{seq // per_folder:04d}/obj-{seq:08d}.bin" for seq in range(nxt, nxt + count)
        ]
        if self.keys:  # a key PutObject already wrote under the same name keeps its body
            keys = [k for k in keys if self.index(k) < 0]
        keys.sort()  # already sorted (zero-padded numbers): one linear pass
        sizes, md5s = array("Q"), bytearray(16 * len(keys))
        for j, key in enumerate(keys):
            pat = pattern(key, 0)
            size = generated_size(pat, mean)
            sizes.append(size)
            md5s[16 * j : 16 * j + 16] = hashlib.md5(generated_body(pat, size)).digest()
        new = Columns(keys, array("I", [0]) * len(keys), sizes, array("I", [now]) * len(keys), md5s)
        return new, sum(sizes)

    def seed(self, prefix: str, count: int, size: int, now: int) -> dict[str, int]:
        self.seeded.setdefault(prefix, [PER_FOLDER, size, 0])
        new, total = self._generate(prefix, count, now)
        self.insert_sorted(new)
        return {"seeded": len(new.keys), "seeded_bytes": total}

    def mutate(
        self,
        prefix: str,
        change: float,
        delete: float,
        add: float,
        seed: int,
        now: int,
        return_keys: bool = False,
    ) -> dict[str, Any]:
        """Change, delete and add percentages of the keys under ``prefix``; with
        ``return_keys`` the changed, deleted and added keys too."""
        lo = bisect_left(self.keys, prefix)
        hi = bisect_left(self.keys, successor(prefix)) if prefix else len(self.keys)
        n = hi - lo
        n_change, n_delete, n_add = (round(n * pct / 100) for pct in (change, delete, add))
        rng = random.Random(seed)
        picks = rng.sample(range(lo, hi), min(n, n_change + n_delete))
        changed_bytes = 0
        mean = self.seeded.get(prefix, [PER_FOLDER, DEFAULT_SIZE, 0])[1]
        for i in picks[:n_change]:
            key = self.keys[i]
            self.bodies.pop(key, None)
            self.meta.pop(key, None)
            gen = self.gens[i] + 1
            pat = pattern(key, gen)
            size = generated_size(pat, mean)
            self.gens[i] = gen
            self.sizes[i] = size
            # Strictly later, even within the same second: size-and-time sync tools
            # (s5cmd sync) must see the change as newer.
            self.mtimes[i] = max(now, self.mtimes[i] + 1)
            self.md5s[16 * i : 16 * i + 16] = hashlib.md5(generated_body(pat, size)).digest()
            changed_bytes += size
        keys = {
            "changed_keys": [self.keys[i] for i in sorted(picks[:n_change])],
            "deleted_keys": [self.keys[i] for i in sorted(picks[n_change:])],
        }
        self.remove_many(picks[n_change:])
        self.seeded.setdefault(prefix, [PER_FOLDER, mean, 0])
        new, added_bytes = self._generate(prefix, n_add, now)
        self.insert_sorted(new)
        result: dict[str, Any] = {
            "changed": len(keys["changed_keys"]),
            "deleted": len(keys["deleted_keys"]),
            "added": len(new.keys),
            "changed_bytes": changed_bytes,
            "added_bytes": added_bytes,
        }
        if return_keys:
            result.update(keys, added_keys=new.keys)
        return result


# ---------------------------------------------------------------------------- S3 protocol


class Reply(NamedTuple):
    status: int
    headers: list[tuple[str, str]]
    body: bytes = b""


class S3Error(Exception):
    def __init__(self, status: int, code: str, message: str, **fields: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.fields = status, code, message, fields


def esc(text: str) -> str:
    if "&" in text or "<" in text or ">" in text or '"' in text:
        text = (
            text.replace("&", "&amp;")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace('"', "&quot;")
        )
    return text


@lru_cache(maxsize=4096)
def iso_time(ts: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(ts))


@lru_cache(maxsize=4096)
def http_date(ts: int) -> str:
    return formatdate(ts, usegmt=True)


def parse_http_date(value: str) -> float | None:
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def etag_matches(header: str, etag: str) -> bool:
    """``If-Match`` / ``If-None-Match``: a list of quoted tags or ``*``."""
    for tag in header.split(","):
        tag = tag.strip().removeprefix("W/").strip('"')
        if tag == "*" or tag == etag:
            return True
    return False


def parse_range(header: str, size: int) -> tuple[int, int] | bool | None:
    """``(first, last)`` inclusive; None to ignore the header (not one valid byte
    range, as S3 ignores it); False when unsatisfiable (416)."""
    unit, _, spec = header.partition("=")
    if unit.strip().lower() != "bytes" or "," in spec:
        return None
    first, dash, last = spec.strip().partition("-")
    if not dash:
        return None
    try:
        if not first:  # suffix: the last N bytes
            n = int(last)
            if n <= 0 or size == 0:
                return False
            return max(0, size - n), size - 1
        start = int(first)
        end = int(last) if last else None
    except ValueError:
        return None
    if start < 0 or (end is not None and end < start):
        return None
    if start >= size:
        return False
    return start, size - 1 if end is None else min(end, size - 1)


def decode_aws_chunked(data: bytes) -> bytes:
    """The payload of an ``aws-chunked`` body (SigV4 streaming, chunk signatures or
    trailing checksums, which are ignored)."""
    out = bytearray()
    pos = 0
    while True:
        eol = data.find(b"\r\n", pos)
        if eol < 0:
            raise S3Error(400, "IncompleteBody", "The request body is not valid aws-chunked.")
        size = int(data[pos:eol].split(b";", 1)[0], 16)
        if size == 0:
            return bytes(out)
        out += data[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2


class S3App:
    """The S3 handler: ``handle(method, target, headers, body) -> Reply``."""

    def __init__(self, latency_ms: float = 0, log: bool = False) -> None:
        self.log = log
        self.buckets: dict[str, Bucket] = {}
        self.stats: Counter[str] = Counter()
        self.latency = latency_ms / 1000
        self.requests = 0
        self.started = time.time()

    # -- dispatch

    def handle(self, method: str, target: str, headers: dict[str, str], body: bytes) -> Reply:
        path, _, query = target.partition("?")
        if path.startswith("/_dev/"):
            return self.control(path, method, body)
        self.requests += 1
        bucket, key = self._address(unquote(path), headers.get("host", ""))
        params = dict(parse_qsl(query, keep_blank_values=True)) if query else {}
        kind = "object" if key else "bucket" if bucket else "service"
        self.stats[f"{method} {kind}"] += 1
        try:
            reply = self._route(method, bucket, key, params, headers, body)
        except S3Error as e:
            reply = self._error(e, bucket, key)
        except Exception as e:  # a bug here: answer as S3 does to a server fault
            self.stats["internal errors"] += 1
            if self.stats["internal errors"] <= 5:  # stderr may be a pipe nobody reads
                traceback.print_exc()
            reply = self._error(S3Error(500, "InternalError", f"{type(e).__name__}"), bucket, key)
        if reply.status >= 300:
            self.stats[f"status {reply.status}"] += 1
        elif method == "GET" and kind == "object":
            self.stats["GET bytes"] += len(reply.body)
        if self.log:
            shown = {k: v for k, v in headers.items() if k not in ("authorization", "host")}
            print(f"{method} {target} -> {reply.status} {shown}", file=sys.stderr, flush=True)
        return reply

    @staticmethod
    def _address(path: str, host: str) -> tuple[str, str]:
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if name.endswith(".localhost"):  # virtual-hosted style on a loopback name
            return name.removesuffix(".localhost"), path[1:]
        bucket, _, key = path[1:].partition("/")
        return bucket, key

    def _route(
        self,
        method: str,
        name: str,
        key: str,
        params: dict[str, str],
        headers: dict[str, str],
        body: bytes,
    ) -> Reply:
        if not name:
            if method in ("GET", "HEAD"):
                return self.list_buckets()
            raise S3Error(405, "MethodNotAllowed", "The specified method is not allowed.")
        unsupported = UNSUPPORTED.intersection(params)
        if unsupported or "x-amz-copy-source" in headers:
            what = ", ".join(sorted(unsupported)) or "x-amz-copy-source"
            raise S3Error(501, "NotImplemented", f"memory-s3 does not implement {what}.")
        if not key:
            if method == "PUT":
                return self.create_bucket(name)
            bucket = self._bucket(name)
            if method == "GET":
                if "location" in params:
                    return self._xml(f'<LocationConstraint xmlns="{NS}"/>')
                if params.get("list-type") == "2":
                    return self.list_objects(bucket, params, v2=True)
                return self.list_objects(bucket, params, v2=False)
            if method == "HEAD":
                return Reply(200, [("x-amz-bucket-region", REGION)])
            if method == "POST" and "delete" in params:
                return self.delete_objects(bucket, body)
            if method == "DELETE":
                if len(bucket):
                    raise S3Error(
                        409, "BucketNotEmpty", "The bucket you tried to delete is not empty"
                    )
                del self.buckets[name]
                return Reply(204, [])
            raise S3Error(405, "MethodNotAllowed", "The specified method is not allowed.")
        bucket = self._bucket(name)
        if method in ("GET", "HEAD"):
            return self.get_object(bucket, key, params, headers, head=method == "HEAD")
        if method == "PUT":
            return self.put_object(bucket, key, headers, body)
        if method == "DELETE":
            i = bucket.index(key)
            if i >= 0:
                bucket.remove(i)
            return Reply(204, [])
        raise S3Error(405, "MethodNotAllowed", "The specified method is not allowed.")

    def _bucket(self, name: str) -> Bucket:
        bucket = self.buckets.get(name)
        if bucket is None:
            raise S3Error(404, "NoSuchBucket", "The specified bucket does not exist")
        return bucket

    def _error(self, e: S3Error, bucket: str, key: str) -> Reply:
        fields = dict(e.fields)
        if e.code == "NoSuchBucket":
            fields.setdefault("BucketName", bucket)
        if e.code == "NoSuchKey":
            fields.setdefault("Key", key)
        extra = "".join(f"<{k}>{esc(str(v))}</{k}>" for k, v in fields.items())
        xml = (
            f"{XML_HEAD}<Error><Code>{e.code}</Code><Message>{esc(e.message)}</Message>"
            f"{extra}<RequestId>{self.requests:016X}</RequestId><HostId>memory-s3</HostId></Error>"
        )
        headers = [("Content-Type", "application/xml")]
        if e.code == "InvalidRange":
            headers.append(("Content-Range", f"bytes */{fields.get('ActualObjectSize', 0)}"))
        return Reply(e.status, headers, xml.encode())

    @staticmethod
    def _xml(text: str, status: int = 200) -> Reply:
        return Reply(status, [("Content-Type", "application/xml")], (XML_HEAD + text).encode())

    # -- buckets

    def list_buckets(self) -> Reply:
        items = "".join(
            f"<Bucket><Name>{esc(b.name)}</Name>"
            f"<CreationDate>{iso_time(int(b.created))}</CreationDate></Bucket>"
            for b in sorted(self.buckets.values(), key=lambda b: b.name)
        )
        return self._xml(
            f'<ListAllMyBucketsResult xmlns="{NS}"><Owner><ID>{OWNER_ID}</ID>'
            f"<DisplayName>{OWNER_NAME}</DisplayName></Owner><Buckets>{items}</Buckets>"
            "</ListAllMyBucketsResult>"
        )

    def create_bucket(self, name: str) -> Reply:
        valid = 3 <= len(name) <= 63 and all(c.islower() or c.isdigit() or c in ".-" for c in name)
        if not valid or not name[0].isalnum() or not name[-1].isalnum():
            raise S3Error(400, "InvalidBucketName", "The specified bucket is not valid.")
        # us-east-1 answers 200 to a bucket you already own (other regions: 409
        # BucketAlreadyOwnedByYou) and leaves it as it is.
        self.buckets.setdefault(name, Bucket(name, time.time()))
        return Reply(200, [("Location", f"/{name}")])

    # -- listing

    def list_objects(self, bucket: Bucket, params: dict[str, str], *, v2: bool) -> Reply:
        self.stats["LIST"] += 1
        if not v2:
            self.stats["LIST v1"] += 1
        prefix = params.get("prefix", "")
        delimiter = params.get("delimiter", "")
        url = params.get("encoding-type", "")
        if url and url != "url":
            raise S3Error(400, "InvalidArgument", "Invalid Encoding Method specified in Request")
        try:
            max_keys = int(params.get("max-keys", MAX_KEYS))
        except ValueError:
            raise S3Error(400, "InvalidArgument", "Provided max-keys not an integer") from None
        if max_keys < 0:
            raise S3Error(400, "InvalidArgument", "max-keys cannot be negative")
        max_keys = min(max_keys, MAX_KEYS)
        keys = bucket.keys
        start = bisect_left(keys, prefix)
        token = params.get("continuation-token")
        start_after = params.get("start-after", "")
        marker = params.get("marker", "")
        if v2 and token is not None:
            try:
                raw = base64.urlsafe_b64decode(token.encode()).decode()
            except (binascii.Error, UnicodeDecodeError, ValueError):
                raw = ""
            if raw[:1] == "k":
                start = max(start, bisect_right(keys, raw[1:]))
            elif raw[:1] == "p":
                start = max(start, bisect_left(keys, successor(raw[1:])))
            else:
                raise S3Error(
                    400, "InvalidArgument", "The continuation token provided is incorrect"
                )
        elif v2 and start_after:
            start = max(start, bisect_right(keys, start_after))
        elif not v2 and marker:
            rest = marker[len(prefix) :] if marker.startswith(prefix) else ""
            cut = rest.find(delimiter) if delimiter else -1
            if cut >= 0 and cut + len(delimiter) == len(rest):  # a CommonPrefix as marker
                start = max(start, bisect_left(keys, successor(marker)))
            else:
                start = max(start, bisect_right(keys, marker))
        end = bisect_left(keys, successor(prefix)) if prefix else len(keys)

        contents: list[int] = []
        prefixes: list[str] = []
        last = ""
        i = start
        skip = len(prefix)
        while i < end and len(contents) + len(prefixes) < max_keys:
            key = keys[i]
            if delimiter:
                cut = key.find(delimiter, skip)
                if cut >= 0:
                    common = key[: cut + len(delimiter)]
                    prefixes.append(common)
                    last = "p" + common
                    i = bisect_left(keys, successor(common), i)
                    continue
            contents.append(i)
            last = "k" + key
            i += 1
        truncated = i < end and max_keys > 0

        enc: Callable[[str], str] = (lambda s: quote_plus(s, safe="/")) if url else esc
        out = [f'<ListBucketResult xmlns="{NS}"><Name>{esc(bucket.name)}</Name>']
        out.append(f"<Prefix>{enc(prefix)}</Prefix>")
        if v2:
            if token is not None:
                out.append(f"<ContinuationToken>{esc(token)}</ContinuationToken>")
            if start_after:
                out.append(f"<StartAfter>{enc(start_after)}</StartAfter>")
            if truncated:
                next_token = base64.urlsafe_b64encode(last.encode()).decode()
                out.append(f"<NextContinuationToken>{next_token}</NextContinuationToken>")
            out.append(f"<KeyCount>{len(contents) + len(prefixes)}</KeyCount>")
        else:
            out.append(f"<Marker>{enc(marker)}</Marker>")
            if truncated and delimiter:
                out.append(f"<NextMarker>{enc(last[1:])}</NextMarker>")
        out.append(f"<MaxKeys>{max_keys}</MaxKeys>")
        if delimiter:
            out.append(f"<Delimiter>{enc(delimiter)}</Delimiter>")
        if url:
            out.append("<EncodingType>url</EncodingType>")
        out.append(f"<IsTruncated>{'true' if truncated else 'false'}</IsTruncated>")
        owner = (
            f"<Owner><ID>{OWNER_ID}</ID><DisplayName>{OWNER_NAME}</DisplayName></Owner>"
            if not v2 or params.get("fetch-owner") == "true"
            else ""
        )
        md5s, sizes, mtimes = bucket.md5s, bucket.sizes, bucket.mtimes
        for i in contents:
            out.append(
                f"<Contents><Key>{enc(keys[i])}</Key>"
                f"<LastModified>{iso_time(mtimes[i])}</LastModified>"
                f"<ETag>&quot;{md5s[16 * i : 16 * i + 16].hex()}&quot;</ETag>"
                f"<Size>{sizes[i]}</Size>{owner}<StorageClass>STANDARD</StorageClass></Contents>"
            )
        for common in prefixes:
            out.append(f"<CommonPrefixes><Prefix>{enc(common)}</Prefix></CommonPrefixes>")
        out.append("</ListBucketResult>")
        return self._xml("".join(out))

    # -- objects

    def get_object(
        self,
        bucket: Bucket,
        key: str,
        params: dict[str, str],
        headers: dict[str, str],
        *,
        head: bool = False,
    ) -> Reply:
        i = bucket.index(key)
        if i < 0:
            raise S3Error(404, "NoSuchKey", "The specified key does not exist.")
        etag = bucket.etag(i)
        mtime = bucket.mtimes[i]
        size = bucket.sizes[i]
        out = [("ETag", f'"{etag}"'), ("Last-Modified", http_date(mtime))]
        # If-Match wins over If-Unmodified-Since, If-None-Match over If-Modified-Since.
        if "if-match" in headers:
            if not etag_matches(headers["if-match"], etag):
                raise S3Error(
                    412,
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                    Condition="If-Match",
                )
        elif "if-unmodified-since" in headers:
            since = parse_http_date(headers["if-unmodified-since"])
            if since is not None and mtime > since:
                raise S3Error(
                    412,
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                    Condition="If-Unmodified-Since",
                )
        if "if-none-match" in headers:
            if etag_matches(headers["if-none-match"], etag):
                return Reply(304, out)
        elif "if-modified-since" in headers:
            since = parse_http_date(headers["if-modified-since"])
            if since is not None and mtime <= since:
                return Reply(304, out)
        meta = bucket.meta.get(key, ())
        ctype = next((v for k, v in meta if k == "Content-Type"), DEFAULT_TYPE)
        out += [("Accept-Ranges", "bytes"), ("Content-Type", ctype)]
        out += [(k, v) for k, v in meta if k != "Content-Type"]
        for name, header in RESPONSE_OVERRIDES.items():
            if name in params:
                out = [(k, v) for k, v in out if k != header] + [(header, params[name])]
        status, first, last = 200, 0, size - 1
        if "range" in headers:
            rng = parse_range(headers["range"], size)
            if rng is False:
                raise S3Error(
                    416,
                    "InvalidRange",
                    "The requested range is not satisfiable",
                    RangeRequested=headers["range"],
                    ActualObjectSize=size,
                )
            if isinstance(rng, tuple):
                status, (first, last) = 206, rng
                out.append(("Content-Range", f"bytes {first}-{last}/{size}"))
        if head:
            out.append(("Content-Length", str(last - first + 1)))
            return Reply(status, out)
        data = bucket.body(i)
        return Reply(status, out, data if status == 200 else data[first : last + 1])

    def put_object(self, bucket: Bucket, key: str, headers: dict[str, str], body: bytes) -> Reply:
        if "aws-chunked" in headers.get("content-encoding", "") or headers.get(
            "x-amz-content-sha256", ""
        ).startswith("STREAMING-"):
            body = decode_aws_chunked(body)
        if "content-md5" in headers:
            try:
                expected = base64.b64decode(headers["content-md5"], validate=True)
            except (binascii.Error, ValueError):
                raise S3Error(
                    400, "InvalidDigest", "The Content-MD5 you specified was invalid."
                ) from None
            if expected != hashlib.md5(body).digest():
                raise S3Error(
                    400,
                    "BadDigest",
                    "The Content-MD5 you specified did not match what we received.",
                )
        i = bucket.index(key)
        if headers.get("if-none-match", "").strip() == "*" and i >= 0:
            raise S3Error(
                412,
                "PreconditionFailed",
                "At least one of the pre-conditions you specified did not hold",
                Condition="If-None-Match",
            )
        if "if-match" in headers:
            if i < 0:
                raise S3Error(404, "NoSuchKey", "The specified key does not exist.")
            if not etag_matches(headers["if-match"], bucket.etag(i)):
                raise S3Error(
                    412,
                    "PreconditionFailed",
                    "At least one of the pre-conditions you specified did not hold",
                    Condition="If-Match",
                )
        meta = [("Content-Type", headers["content-type"])] if "content-type" in headers else []
        meta += [(k, v) for k, v in headers.items() if k.startswith("x-amz-meta-")]
        etag = bucket.put(key, body, meta, int(time.time()))
        # Checksums the client sent are echoed, as S3 does (not verified nor stored).
        sums = [(k, v) for k, v in headers.items() if k.startswith("x-amz-checksum-")]
        return Reply(200, [("ETag", f'"{etag}"'), *sums])

    def delete_objects(self, bucket: Bucket, body: bytes) -> Reply:
        try:
            root = ElementTree.fromstring(body)
        except ElementTree.ParseError:
            raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed") from None

        def local(tag: str) -> str:
            return tag.rsplit("}", 1)[-1]

        quiet = any(local(e.tag) == "Quiet" and (e.text or "").strip() == "true" for e in root)
        keys = [
            next((c.text or "" for c in e if local(c.tag) == "Key"), "")
            for e in root
            if local(e.tag) == "Object"
        ]
        if not keys or len(keys) > 1000:
            raise S3Error(400, "MalformedXML", "The XML you provided was not well-formed")
        done = []
        for key in keys:
            i = bucket.index(key)
            if i >= 0:
                bucket.remove(i)
            if not quiet:
                done.append(f"<Deleted><Key>{esc(key)}</Key></Deleted>")
        return self._xml(f'<DeleteResult xmlns="{NS}">{"".join(done)}</DeleteResult>')

    # -- control

    def control(self, path: str, method: str, body: bytes) -> Reply:
        try:
            args = json.loads(body) if body.strip() else {}
            result = self._control(path, method, args)
        except (KeyError, TypeError, ValueError, S3Error) as e:
            data = json.dumps({"error": f"{type(e).__name__}: {e}"}).encode()
            return Reply(400, [("Content-Type", "application/json")], data)
        if result is None:
            return Reply(404, [("Content-Type", "application/json")], b'{"error": "no such path"}')
        return Reply(200, [("Content-Type", "application/json")], json.dumps(result).encode())

    def _control(self, path: str, method: str, args: dict[str, Any]) -> Any:
        now = int(time.time())
        if path == "/_dev/stats":
            return dict(self.stats)
        if path == "/_dev/reset" and method == "POST":
            self.stats.clear()
            return {}
        if path == "/_dev/info":
            return self.info()
        if method != "POST":
            return None
        if path == "/_dev/latency":
            self.latency = float(args["ms"]) / 1000
            return {"latency_ms": self.latency * 1000}
        if path == "/_dev/drop":
            self.buckets.pop(args["bucket"], None)
            self._trim()
            return {"dropped": args["bucket"]}
        if path == "/_dev/seed":
            started = time.perf_counter()
            self.create_bucket(args["bucket"])
            bucket = self.buckets[args["bucket"]]
            size = int(args.get("size", DEFAULT_SIZE))
            result = bucket.seed(args.get("prefix", ""), int(args["count"]), size, now)
            self._trim()
            return {**result, **self._totals(bucket), "seconds": time.perf_counter() - started}
        if path == "/_dev/mutate":
            started = time.perf_counter()
            bucket = self.buckets[args["bucket"]]
            result = bucket.mutate(
                args.get("prefix", ""),
                float(args.get("change", 0)),
                float(args.get("delete", 0)),
                float(args.get("add", 0)),
                int(args.get("seed", 0)),
                now,
                bool(args.get("return_keys", False)),
            )
            self._trim()
            return {**result, **self._totals(bucket), "seconds": time.perf_counter() - started}
        return None

    @staticmethod
    def _trim() -> None:
        """Hand the heap freed by a bulk operation back to the system (glibc)."""
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)

    @staticmethod
    def _totals(bucket: Bucket) -> dict[str, int]:
        return {"objects": len(bucket), "bytes": bucket.total_bytes()}

    def info(self) -> dict[str, Any]:
        status = {}
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith(("VmRSS:", "VmHWM:")):
                        status[line.split(":")[0]] = int(line.split()[1]) / 1024
        except OSError:
            pass
        times = os.times()
        return {
            "buckets": {name: self._totals(b) for name, b in sorted(self.buckets.items())},
            "rss_mb": status.get("VmRSS"),
            "peak_rss_mb": status.get("VmHWM"),
            "cpu_seconds": times.user + times.system,
            "requests": self.requests,
            "latency_ms": self.latency * 1000,
        }


# ---------------------------------------------------------------------------- HTTP/1.1


@lru_cache(maxsize=4)
def _date_header(second: int) -> bytes:
    return f"Date: {formatdate(second, usegmt=True)}\r\n".encode()


def serialize(reply: Reply, head: bool, close: bool, request_id: int) -> bytes:
    status = reply.status
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Unknown')}\r\n"]
    has_length = False
    for name, value in reply.headers:
        lines.append(f"{name}: {value}\r\n")
        has_length = has_length or name == "Content-Length"
    lines.append(f"x-amz-request-id: {request_id:016X}\r\nServer: AmazonS3\r\n")
    if not has_length and status not in (204, 304):
        lines.append(f"Content-Length: {len(reply.body)}\r\n")
    if close:
        lines.append("Connection: close\r\n")
    head_bytes = "".join(lines).encode("latin-1") + _date_header(int(time.time())) + b"\r\n"
    if head or status in (204, 304) or not reply.body:
        return head_bytes
    return head_bytes + reply.body


def dechunk(buf: bytearray, start: int) -> tuple[bytes, int] | None:
    """A ``Transfer-Encoding: chunked`` body from ``buf[start:]``: (body, end) or None
    while incomplete."""
    out = bytearray()
    pos = start
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        if size == 0:
            end = buf.find(b"\r\n\r\n", eol)  # optional trailers, then an empty line
            if buf[eol : eol + 4] == b"\r\n\r\n":
                return bytes(out), eol + 4
            return (bytes(out), end + 4) if end >= 0 else None
        if len(buf) < eol + 2 + size + 2:
            return None
        out += buf[eol + 2 : eol + 2 + size]
        pos = eol + 2 + size + 2


class Connection(asyncio.Protocol):
    """One client connection: parse requests, answer in order after the latency."""

    def __init__(self, app: S3App) -> None:
        self.app = app
        self.buf = bytearray()
        self.pending: deque[list[Any]] = deque()  # [ready, data, close]
        self.transport: asyncio.Transport | None = None
        self.continued = False
        self.closing = False
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        try:
            self._parse()
        except (ValueError, UnicodeDecodeError):
            self._answer(Reply(400, [], b"bad request"), head=False, close=True, delay=False)

    def _parse(self) -> None:
        buf = self.buf
        while not self.closing:
            while buf[:2] == b"\r\n":
                del buf[:2]
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > MAX_HEAD:
                    self._answer(Reply(431, []), head=False, close=True, delay=False)
                return
            lines = buf[:end].decode("latin-1").split("\r\n")
            method, target, version = lines[0].split(" ", 2)
            headers: dict[str, str] = {}
            for line in lines[1:]:
                name, _, value = line.partition(":")
                name = name.strip().lower()
                value = value.strip()
                headers[name] = f"{headers[name]}, {value}" if name in headers else value
            start = end + 4
            if "chunked" in headers.get("transfer-encoding", "").lower():
                got = dechunk(buf, start)
                if got is None:
                    self._continue(headers)
                    return
                body, consumed = got
            else:
                length = int(headers.get("content-length") or 0)
                if len(buf) - start < length:
                    self._continue(headers)
                    return
                body, consumed = bytes(buf[start : start + length]), start + length
            del buf[:consumed]
            self.continued = False
            conn = headers.get("connection", "").lower()
            close = "close" in conn or (version == "HTTP/1.0" and "keep-alive" not in conn)
            reply = self.app.handle(method, target, headers, body)
            self._answer(reply, method == "HEAD", close, delay=not target.startswith("/_dev/"))

    def _continue(self, headers: dict[str, str]) -> None:
        if not self.continued and headers.get("expect", "").lower() == "100-continue":
            self.continued = True
            assert self.transport is not None
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _answer(self, reply: Reply, head: bool, close: bool, delay: bool) -> None:
        data = serialize(reply, head, close, self.app.requests)
        entry = [False, data, close]
        self.pending.append(entry)
        if close:
            self.closing = True
        if delay and self.app.latency > 0:
            self.loop.call_later(self.app.latency, self._release, entry)
        else:
            self._release(entry)

    def _release(self, entry: list[Any]) -> None:
        entry[0] = True
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        while self.pending and self.pending[0][0]:
            _, data, close = self.pending.popleft()
            transport.write(data)
            if close:
                transport.close()
                self.pending.clear()
                return


async def _serve(host: str, port: int, app: S3App) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(app), host, port, backlog=1024)
    async with server:
        await server.serve_forever()


def serve(host: str, port: int, latency_ms: float = 0, log: bool = False) -> None:
    app = S3App(latency_ms, log)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(host, port, app))


# ---------------------------------------------------------------------------- client side


class MemoryS3(ChildServer):
    """Start the server in a child process; ``with MemoryS3() as srv: srv.url``."""

    label = "in-memory S3 server"

    def __init__(
        self,
        *,
        latency_ms: float = 0,
        port: int | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        super().__init__(port)
        self.cmd = [
            sys.executable,
            "-m",
            "dev.servers.memory_s3",
            "--port",
            str(self.port),
            "--latency-ms",
            str(latency_ms),
        ]
        self.env = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", **(env or {})}

    def admin(self, path: str, body: dict[str, Any] | None = None, timeout: float = 900) -> Any:
        """POST to a control endpoint; bulk operations on a million keys take seconds."""
        req = urllib.request.Request(
            f"{self.url}{path}",
            method="POST",
            data=json.dumps(body or {}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())

    def seed(
        self, bucket: str, count: int, *, prefix: str = "", size: int = DEFAULT_SIZE
    ) -> dict[str, Any]:
        """Create ``bucket`` if needed and add ``count`` generated objects under ``prefix``."""
        return dict(
            self.admin(
                "/_dev/seed", {"bucket": bucket, "count": count, "prefix": prefix, "size": size}
            )
        )

    def mutate(
        self,
        bucket: str,
        *,
        change: float = 0,
        delete: float = 0,
        add: float = 0,
        prefix: str = "",
        seed: int = 0,
        return_keys: bool = False,
    ) -> dict[str, Any]:
        """Change, delete and add percentages of the keys under ``prefix`` (the same
        ``seed``, the same keys); ``return_keys`` adds ``changed_keys``,
        ``deleted_keys`` and ``added_keys``."""
        body: dict[str, Any] = {"bucket": bucket, "prefix": prefix, "seed": seed}
        body.update(change=change, delete=delete, add=add, return_keys=return_keys)
        return dict(self.admin("/_dev/mutate", body))

    def drop(self, bucket: str) -> None:
        self.admin("/_dev/drop", {"bucket": bucket})

    def set_latency(self, ms: float) -> None:
        self.admin("/_dev/latency", {"ms": ms})

    def info(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.url}/_dev/info", timeout=30) as r:
            return dict(json.loads(r.read()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--latency-ms", type=float, default=0, help="added to every S3 request")
    p.add_argument("--log", action="store_true", help="print every S3 request to stderr")
    a = p.parse_args(argv)
    serve(a.host, a.port, a.latency_ms, a.log)


if __name__ == "__main__":
    main()
