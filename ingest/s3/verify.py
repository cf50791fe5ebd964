"""Checking a downloaded file against what S3 says of the object's content.

Every download is checked before it is published (``verify``), with the strongest
evidence the store gives:

1. the size against the listing, always;
2. a single-part ETag is the MD5 of the body: compared (the download computes it while
   writing);
3. a multipart ETag (``"<md5 of the parts' MD5s>-<parts>"``) is recomputed from the
   file with the part size: first the sizes upload tools use that the listed size and
   part count allow (8, 5, 16, 10, 15, 64, 100 MiB and the smallest whole MiB that
   fits), then, when none of them gives the ETag, the size the store reports for part 1
   (``HeadObject`` with ``PartNumber=1``: its ``Content-Length``, with
   ``x-amz-mp-parts-count``). A known part size whose ETag differs is a mismatch; a part
   size the store does not tell (it refuses ``PartNumber``) leaves the ETag unchecked;
4. an ETag that is neither (an SSE-KMS object, a multipart object of unknown part size)
   is checked against S3's additional checksum of the whole object, asked once with
   ``ChecksumMode=ENABLED``: SHA-256, SHA-1, CRC64NVME, CRC32C or CRC32, the strongest
   it keeps (CRC32C and CRC64NVME through ``anycrc``, imported only when a store offers
   one). A store that refuses ``ChecksumMode`` (some S3-compatible servers answer 400 or
   501 since AWS's 2025 defaults) is asked without it, and not asked with it again on
   that connection.

A mismatch is an ``IntegrityError``: the caller fetches the object again, as many times
as a 5xx answer gets (``ingest.s3.download``), then it is a failed row.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
import re
import threading
import weakref
import zlib
from collections.abc import Callable
from typing import Any

import botocore.exceptions as bce

from ingest.errors import DownloadError, IntegrityError
from ingest.records import S3Object
from ingest.s3.errors import attempts_of, error_code, refusal

log = logging.getLogger(__name__)

MiB = 1024 * 1024
READ = 4 * MiB
_MD5_ETAG = re.compile(r"[0-9a-f]{32}")
_MULTIPART_ETAG = re.compile(r"([0-9a-f]{32})-(\d{1,5})")
# Part sizes of common upload tools (aws cli / boto3 8 MiB, rclone 5, mc 16, object_store
# 10, s5cmd 50 ...), tried first; then the smallest whole MiB the size and count allow.
COMMON_PART_SIZES = tuple(n * MiB for n in (8, 5, 16, 10, 15, 50, 64, 100))

# Connections whose store refused ChecksumMode=ENABLED: asked without it from then on.
_refuses_checksum_mode: weakref.WeakSet[Any] = weakref.WeakSet()
_refusals_lock = threading.Lock()


def implied_part_sizes(size: int, parts: int) -> list[int]:
    """Part sizes in whole MiB that split ``size`` bytes into exactly ``parts`` parts
    (every part but the last full): the common ones first, then the smallest."""
    if parts < 1 or size < 1:
        return []

    def fits(p: int) -> bool:
        return (parts - 1) * p < size <= parts * p

    found = [p for p in COMMON_PART_SIZES if fits(p)]
    smallest = -(-size // parts)
    smallest = -(-smallest // MiB) * MiB
    if fits(smallest) and smallest not in found:
        found.append(smallest)
    return found


def composite_etag(path: str, part_size: int) -> str:
    """The multipart ETag of the file cut into parts of ``part_size`` bytes."""
    digests = []
    with open(path, "rb") as f:
        while True:
            md5 = hashlib.md5(usedforsecurity=False)
            left = part_size
            while left:
                chunk = f.read(min(READ, left))
                if not chunk:
                    break
                md5.update(chunk)
                left -= len(chunk)
            if left == part_size:
                break
            digests.append(md5.digest())
            if left:
                break
    whole = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
    return f"{whole}-{len(digests)}"


def file_digest(path: str, hasher: Any) -> Any:
    """``hasher`` (anything with ``update``) fed the whole file at ``path``."""
    with open(path, "rb") as f:
        while chunk := f.read(READ):
            hasher.update(chunk)
    return hasher


# S3's CRC32C and CRC64NVME, by their catalogue names in anycrc (imported only when a
# store offers one of them: most runs never meet either).
_ANYCRC = {"ChecksumCRC32C": ("CRC32C", 4), "ChecksumCRC64NVME": ("CRC64-NVME", 8)}


class _Crc:
    """A CRC as a hasher: ``calc(chunk, value)`` (``zlib.crc32``, an anycrc model's
    ``calc``) folds each chunk in; the digest is the value's ``width`` bytes, big-endian."""

    def __init__(self, calc: Callable[[bytes, int], int], width: int) -> None:
        self.calc, self.width, self.value = calc, width, 0

    def update(self, chunk: bytes) -> None:
        self.value = self.calc(chunk, self.value)

    def digest(self) -> bytes:
        return int(self.value).to_bytes(self.width, "big")


def _hasher(field: str) -> Callable[[], Any] | None:
    """A new hasher of the checksum S3 names ``field``; None for one not computed here."""
    if field == "ChecksumSHA256":
        return hashlib.sha256
    if field == "ChecksumSHA1":
        return lambda: hashlib.sha1(usedforsecurity=False)
    if field == "ChecksumCRC32":
        return lambda: _Crc(zlib.crc32, 4)
    if field in _ANYCRC:
        name, width = _ANYCRC[field]
        try:
            import anycrc  # type: ignore[import-untyped]
        except ImportError:  # an install without it: checked by what else the store offers
            return None
        model = anycrc.Model(name)
        return lambda: _Crc(model.calc, width)
    return None


# Strongest first.
_ORDER = ("ChecksumSHA256", "ChecksumSHA1", "ChecksumCRC64NVME", "ChecksumCRC32C", "ChecksumCRC32")


def verify(
    client: Any,
    obj: S3Object,
    path: str,
    *,
    attempts: int,
    md5_hex: str | None = None,
    size: int | None = None,
) -> str:
    """Check the file at ``path`` against ``obj``; what it was checked by (``md5``,
    ``etag``, ``ChecksumSHA256`` ..., or ``size`` when the store gives nothing more).
    Raises ``IntegrityError`` on a mismatch. ``client``: a boto3 S3 client for the HEADs
    (only objects whose ETag is not an MD5 need one)."""
    if size is None:
        size = os.stat(path).st_size
    if size != obj.size:
        raise IntegrityError(
            f"size {size} differs from the listed {obj.size}", key=obj.key, attempts=attempts
        )
    etag = obj.etag.lower()
    if not obj.size or not etag:
        return "size"
    if _MD5_ETAG.fullmatch(etag):
        md5_hex = md5_hex or file_digest(path, hashlib.md5(usedforsecurity=False)).hexdigest()
        if md5_hex != etag:
            raise IntegrityError(
                f"MD5 {md5_hex} differs from the ETag {obj.etag}", key=obj.key, attempts=attempts
            )
        return "md5"
    multipart = _MULTIPART_ETAG.fullmatch(etag)
    if multipart:
        parts = int(multipart.group(2))
        tried = implied_part_sizes(obj.size, parts)
        for part_size in tried:
            if composite_etag(path, part_size) == etag:
                return "etag"
        part_size_told = _part_size(client, obj, attempts)
        if part_size_told is not None:
            if part_size_told in tried:
                got = None  # already computed: it differed
            else:
                got = composite_etag(path, part_size_told)
                if got == etag:
                    return "etag"
            raise IntegrityError(
                f"multipart ETag {got or 'recomputed'} (parts of {part_size_told} bytes) "
                f"differs from the ETag {obj.etag}",
                key=obj.key,
                attempts=attempts,
            )
    return _verify_checksum(client, obj, path, attempts)


def _head(client: Any, obj: S3Object, attempts: int, **kw: Any) -> dict[str, Any]:
    try:
        return dict(client.head_object(Bucket=obj.bucket, Key=obj.key, **kw))
    except bce.ClientError as exc:
        if (final := refusal(exc, obj.bucket, obj.key, attempts + attempts_of(exc))) is not None:
            raise final from exc
        raise
    except bce.BotoCoreError as exc:
        raise DownloadError(
            f"HEAD for the checksum failed: {exc}", key=obj.key, attempts=attempts
        ) from exc


def _status(exc: bce.ClientError) -> int:
    return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)


def _head_failed(what: str, obj: S3Object, exc: bce.ClientError, attempts: int) -> DownloadError:
    """A HEAD the store failed to answer (5xx, throttled): the download is retried."""
    return DownloadError(
        f"HEAD for the {what} failed: {error_code(exc) or _status(exc)}",
        key=obj.key,
        attempts=attempts + attempts_of(exc),
    )


def _part_size(client: Any, obj: S3Object, attempts: int) -> int | None:
    """The size of part 1 as the store reports it (``PartNumber=1``), None when it does
    not say (it refuses the parameter or answers the whole object). No If-Match: some
    stores compare it with the part's own ETag; the download itself was pinned."""
    try:
        head = _head(client, obj, attempts, PartNumber=1)
    except bce.ClientError as exc:
        if _status(exc) >= 500 or error_code(exc) in ("SlowDown", "InternalError"):
            raise _head_failed("part size", obj, exc, attempts) from exc
        log.info("s3://%s/%s: the store does not tell part sizes (%s)", obj.bucket, obj.key, exc)
        return None
    if not head.get("PartsCount"):
        return None
    length = head.get("ContentLength")
    return int(length) if length else None


def _verify_checksum(client: Any, obj: S3Object, path: str, attempts: int) -> str:
    """Check the file against an additional checksum of the whole object, when the store
    keeps one that can be computed here; ``size`` when there is none."""
    pinned = {"IfMatch": f'"{obj.etag}"'} if obj.etag else {}
    if client in _refuses_checksum_mode:
        return "size"
    try:
        head = _head(client, obj, attempts, ChecksumMode="ENABLED", **pinned)
    except bce.ClientError as exc:
        if _status(exc) >= 500 and error_code(exc) != "NotImplemented":
            raise _head_failed("checksum", obj, exc, attempts) from exc
        # The store refuses ChecksumMode: the size is all that can be checked here.
        with _refusals_lock:
            _refuses_checksum_mode.add(client)
        log.info(
            "s3://%s/%s: the store refuses ChecksumMode (%s); checked by size",
            obj.bucket,
            obj.key,
            error_code(exc) or _status(exc),
        )
        return "size"
    if head.get("ChecksumType", "FULL_OBJECT") != "FULL_OBJECT":
        return "size"  # a checksum of the parts' checksums: the part size is not known
    for field in _ORDER:
        value = head.get(field)
        if not value or "-" in str(value):
            continue
        make = _hasher(field)
        if make is None:
            continue
        got = base64.b64encode(file_digest(path, make()).digest()).decode()
        if got != value:
            raise IntegrityError(
                f"{field.removeprefix('Checksum')} {got} differs from the object's {value}",
                key=obj.key,
                attempts=attempts,
            )
        return field
    return "size"
