"""S3 listing on a shared boto3 client; object GETs on obstore.

Listing and the bucket check go through boto3 (``list_page``, ``check_bucket``).
The data path (``GetObject``) goes through obstore (the Python bindings of Rust's
``object_store``): one ``S3Store`` per client and bucket (``object_store``), with
the boto3 session's credentials (the standard AWS chain or a Prefect
``AwsCredentials`` block, refreshed through ``get_frozen_credentials``), the
endpoint and region of the client, path-style addressing for custom endpoints,
``allow_http`` for ``http://`` endpoints, the client's timeouts and a connection
pool as large as the client's. Measured on 64 threads, ~30 KB objects, 20 ms of
latency: ~0.3-0.4 ms of client CPU per GET against ~0.7 ms for botocore's SigV4
signer on the client's urllib3 session (the previous path) and ~1.8 ms for
``client.get_object`` (see benchmarks/README.md). obstore's blocking ``get``
releases the GIL, so the GETs stay on the process-wide thread pool shared by
batch tasks; ``get_async`` on one event loop cost more CPU per GET (~0.55-0.6 ms).

Retry layers, one per failure kind:

1. Each GET request is retried here (``_get_obstore``; obstore's own retries
   are off so that every request is counted in the ``attempts`` column):
   5xx answers, 429 and throttling/transient codes (503 SlowDown ...,
   ``_RETRY_CODES``) and connection errors, with capped exponential backoff
   and full jitter (``_backoff``: 1 s base, 20 s cap, as botocore), up to
   ``Settings.s3_max_attempts`` retries after the first request
   (``get_attempts``). The listing's requests get the same policy from
   botocore's ``standard`` retry mode.
2. A body stream broken mid-transfer (connection reset, truncated body,
   read timeout) is resumed here with a ``Range`` request from the last byte
   written, up to ``Settings.s3_stream_retries`` times (``STREAM_ERRORS``).
3. Prefect retries a whole batch task (``tasks/s3.py``) with exponential
   backoff and jitter, for failures that no object row can hold (disk full,
   the batch's Parquet file cannot be written).

So one object costs at most ``(s3_max_attempts + 1) x (s3_stream_retries + 1)``
requests per batch attempt.

obstore reports a refused answer as text; ``_failure`` reads the HTTP status and
the S3 error code from it. Answers the GET path does not handle itself (a
redirect, a 400 without an error code), keys obstore's path type cannot name,
and clients not built by ``make_client`` go through ``client.get_object``.
Integrity is checked here, not by the HTTP client: size against the listing,
MD5 against single-part ETags (``_verify``).

Terminal errors (missing bucket, access denied, rejected credentials) are
translated into ``TerminalError`` by ``translate_errors`` and stop the run.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import random
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.exceptions as bce
import obstore
import obstore.exceptions as obstore_exc
from botocore.config import Config
from obstore.auth.boto3 import Boto3CredentialProvider
from obstore.store import S3Store
from urllib3.exceptions import ProtocolError

from ingest.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    CredentialsError,
    DownloadError,
    EndpointError,
    IntegrityError,
    ItemError,
    ObjectChangedError,
)
from ingest.keys import TMP_DIR_NAME
from ingest.records import S3Object
from ingest.settings import Settings

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
# obstore gathers a body into chunks of at least this size (and copies each into Python):
# two buffers per request in flight, so kept smaller than CHUNK to bound memory.
STREAM_CHUNK = 256 * 1024
INTEGRITY_RETRIES = 1  # a body failing its size/MD5/CRC check is fetched once more

# Errors raised while reading a response body (s3transfer retries the same set).
STREAM_ERRORS: tuple[type[BaseException], ...] = (
    socket.timeout,
    ConnectionError,
    ProtocolError,
    bce.IncompleteReadError,
    bce.ReadTimeoutError,
    bce.ResponseStreamingError,
    obstore_exc.BaseError,  # obstore: body interrupted, read timeout
)

_TERMINAL_CODES = {
    "NoSuchBucket": BucketNotFoundError,
    "AccessDenied": AccessDeniedError,
    "AllAccessDisabled": AccessDeniedError,
    "InvalidAccessKeyId": CredentialsError,
    "SignatureDoesNotMatch": CredentialsError,
    "ExpiredToken": CredentialsError,
    "InvalidToken": CredentialsError,
}
_HINTS = {
    BucketNotFoundError: "check the bucket name, the endpoint URL and the region",
    AccessDeniedError: "grant s3:ListBucket and s3:GetObject on the bucket to these credentials",
    CredentialsError: "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, the profile or the "
    "credentials block",
    EndpointError: "check the endpoint URL and that the server is running",
}


# --------------------------------------------------------------------------- client


_clients: dict[tuple[Any, ...], Any] = {}
_clients_lock = threading.Lock()


def make_client(settings: Settings, credentials: dict[str, str] | None = None) -> Any:
    """A boto3 S3 client whose connection pool matches the request concurrency.

    Clients are thread-safe and cached per process, so batch tasks running in
    threads share one pool of keep-alive connections.
    """
    key = (
        settings.s3_endpoint_url,
        settings.s3_region,
        settings.s3_concurrency,
        settings.s3_max_attempts,
        settings.s3_connect_timeout,
        settings.s3_read_timeout,
        tuple(sorted((credentials or {}).items())),
    )
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            config = Config(
                max_pool_connections=settings.s3_concurrency + 4,
                retries={"mode": "standard", "max_attempts": settings.s3_max_attempts},
                connect_timeout=settings.s3_connect_timeout,
                read_timeout=settings.s3_read_timeout,
                tcp_keepalive=True,
                s3={"addressing_style": "path"} if settings.s3_endpoint_url else None,
            )
            session = boto3.session.Session(**(credentials or {}))  # type: ignore[arg-type]
            client = session.client(
                "s3",
                endpoint_url=settings.s3_endpoint_url,
                region_name=settings.s3_region or session.region_name or "us-east-1",
                config=config,
            )
            _clients[key] = client
            _client_sources[id(client)] = (session, settings)
        return client


_executors: dict[int, ThreadPoolExecutor] = {}


def request_pool(concurrency: int) -> ThreadPoolExecutor:
    """The process-wide pool that bounds requests in flight, shared by all batches."""
    with _clients_lock:
        pool = _executors.get(concurrency)
        if pool is None:
            pool = ThreadPoolExecutor(concurrency, thread_name_prefix="s3-get")
            _executors[concurrency] = pool
        return pool


# --------------------------------------------------------------------------- errors


def error_code(exc: BaseException) -> str:
    if isinstance(exc, bce.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def attempts_of(exc: BaseException) -> int:
    """Requests botocore made for the call that raised ``exc``."""
    if isinstance(exc, bce.ClientError):
        return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0)) + 1
    return 1


@contextmanager
def translate_errors(bucket: str) -> Iterator[None]:
    """Turn bucket-level botocore failures into TerminalError with a hint."""
    try:
        yield
    except bce.ClientError as exc:
        code = error_code(exc)
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        kind = _TERMINAL_CODES.get(code)
        if kind is None and status == 404:
            kind = BucketNotFoundError
        if kind is None and status == 403:
            kind = AccessDeniedError
        if kind is None:
            raise
        raise kind(f"s3://{bucket}: {code or status} ({_HINTS[kind]})") from exc
    except (bce.NoCredentialsError, bce.PartialCredentialsError) as exc:
        raise CredentialsError(
            f"s3://{bucket}: no credentials ({_HINTS[CredentialsError]})"
        ) from exc
    except (bce.EndpointConnectionError, bce.ConnectTimeoutError) as exc:
        raise EndpointError(f"s3://{bucket}: {exc} ({_HINTS[EndpointError]})") from exc


# --------------------------------------------------------------------------- listing


@dataclass(slots=True)
class ListPage:
    """One page of a listing: up to 1,000 objects and the token of the next page."""

    objects: list[S3Object]
    next_token: str | None


def check_bucket(client: Any, bucket: str) -> None:
    """Fail fast, with a hint, when the bucket is missing or not ours.

    A one-key listing rather than HeadBucket: HEAD answers carry no error body,
    so a 403 could not tell rejected credentials from a missing permission.
    """
    with translate_errors(bucket):
        client.list_objects_v2(Bucket=bucket, MaxKeys=1)


def list_page(client: Any, bucket: str, prefix: str, token: str | None = None) -> ListPage:
    """One ListObjectsV2 page. Pages are fetched one by one so that the
    caller can start downloading the first while asking for the next."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
    if token:
        kwargs["ContinuationToken"] = token
    with translate_errors(bucket):
        resp = client.list_objects_v2(**kwargs)
    objects = [
        S3Object(
            bucket=bucket,
            key=item["Key"],
            etag=item.get("ETag", "").strip('"'),
            size=int(item.get("Size", 0)),
            last_modified=item["LastModified"],
        )
        for item in resp.get("Contents", ())
    ]
    next_token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
    return ListPage(objects, next_token)


def list_objects(client: Any, bucket: str, prefix: str = "") -> Iterator[S3Object]:
    """Every object under ``prefix``, streamed page by page."""
    token: str | None = None
    while True:
        page = list_page(client, bucket, prefix, token)
        yield from page.objects
        if not page.next_token:
            return
        token = page.next_token


# --------------------------------------------------------------------------- download


@dataclass(slots=True)
class Fetched:
    """Outcome of one successful object download."""

    attempts: int
    seconds: float


@dataclass(slots=True)
class _Ranged:
    """State of one object fetched as parallel byte ranges."""

    obj: S3Object
    dest: Path
    tmp: Path
    fd: int
    started: float
    pending: int
    attempts: int = 0
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def temp_path(root: Path) -> Path:
    """A unique temporary name on the same filesystem as the destination.

    The owner's pid is part of the name so that leftovers of a killed run can
    be told from files a live run is still writing (``sweep_temp``).
    """
    tmp_dir = root / TMP_DIR_NAME
    tmp_dir.mkdir(parents=True, exist_ok=True)
    return tmp_dir / f"{os.getpid()}-{uuid.uuid4().hex}.part"


def sweep_temp(root: Path) -> int:
    """Remove temporary files left by runs whose process is gone."""
    removed = 0
    tmp_dir = root / TMP_DIR_NAME
    if not tmp_dir.is_dir():
        return 0
    for path in tmp_dir.iterdir():
        pid = path.name.split("-", 1)[0]
        if pid.isdigit() and not _pid_alive(int(pid)):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# Codes that make a failed GET not worth a batch retry.
_FINAL_GET_CODES = ("NoSuchKey", "NoSuchBucket", "AccessDenied", "InvalidObjectState")
# Error codes S3 and compatible servers send for throttling and transient failures: retried
# like 5xx answers (the set botocore's standard retry mode retries).
_RETRY_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "BandwidthLimitExceeded",
        "RequestTimeout",
        "RequestTimeoutException",
        "PriorRequestNotComplete",
        "InternalError",
        "ServiceUnavailable",
    }
)
# obstore reports an HTTP answer it did not accept as text: the status and the S3 error body.
_STATUS_RE = re.compile(r"status code: (\d{3})")
_CODE_RE = re.compile(r"<Code>([^<]{1,128})</Code>")
BACKOFF_BASE = 1.0  # seconds: full jitter over min(cap, base x 2^(attempt-1)), as botocore
BACKOFF_CAP = 20.0
# Frozen credentials obstore reuses before asking the session again (botocore refreshes
# temporary credentials 10-15 minutes before they expire, so 5 minutes stays inside that).
CREDENTIALS_TTL = timedelta(minutes=5)
OPEN_ENDED_TIMEOUT = timedelta(
    hours=1
)  # obstore's whole-request timeout (default 30 s); stalls are
# caught by the read timeout (Settings.s3_read_timeout) instead.

# id(client) -> (boto3 session, settings) of the clients make_client built (they are cached
# for the life of the process, so an id is never reused for another client).
_client_sources: dict[int, tuple[boto3.session.Session, Settings]] = {}
_stores: dict[tuple[int, str], S3Store | None] = {}


def object_store(client: Any, bucket: str) -> S3Store | None:
    """The obstore ``S3Store`` of ``bucket`` for a client built by ``make_client``.

    Same credentials (the boto3 session's chain, refreshed through
    ``get_frozen_credentials``), endpoint, region and timeouts as the client; path-style
    addressing for custom endpoints; as many pooled connections as the client; obstore's
    own retries off (``ingest.s3._get_obstore`` retries, counting attempts). None for
    a client built elsewhere or a configuration obstore cannot take: the GET then goes
    through ``client.get_object``.
    """
    key = (id(client), bucket)
    try:
        return _stores[key]
    except KeyError:
        pass
    with _clients_lock:
        if key not in _stores:
            _stores[key] = _new_store(client, bucket)
        return _stores[key]


def _new_store(client: Any, bucket: str) -> S3Store | None:
    source = _client_sources.get(id(client))
    if source is None or bucket.endswith("--x-s3"):  # S3 Express needs session auth
        return None
    session, settings = source
    endpoint = settings.s3_endpoint_url
    options: dict[str, Any] = {
        "connect_timeout": timedelta(seconds=settings.s3_connect_timeout),
        "read_timeout": timedelta(seconds=settings.s3_read_timeout),
        "timeout": OPEN_ENDED_TIMEOUT,
        "pool_max_idle_per_host": str(settings.s3_concurrency + 4),
    }
    if endpoint and urlsplit(endpoint).scheme == "http":
        options["allow_http"] = True
    config: dict[str, Any] = {"region": client.meta.region_name}
    if endpoint:
        config["endpoint"] = endpoint
        config["virtual_hosted_style_request"] = False
    try:
        if session.get_credentials() is None:
            return None  # no credentials: client.get_object raises the usual error
        return S3Store(
            bucket,
            config=config,  # type: ignore[arg-type]
            client_options=options,  # type: ignore[arg-type]
            retry_config={"max_retries": 0},
            credential_provider=Boto3CredentialProvider(session, ttl=CREDENTIALS_TTL),
        )
    except Exception as exc:  # an unusual configuration: let botocore handle it
        log.warning("s3://%s: no obstore store (%s); GETs go through boto3", bucket, exc)
        return None


def _failure(exc: BaseException) -> tuple[int | None, str]:
    """HTTP status (None for a transport error) and S3 error code of a failed obstore GET."""
    text = str(exc)
    status = _STATUS_RE.search(text)
    code = _CODE_RE.search(text)
    return (int(status.group(1)) if status else None), (code.group(1) if code else "")


def _backoff(attempt: int) -> float:
    return random.random() * min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))


def _get_obstore(
    store: S3Store, obj: S3Object, start: int, end: int, whole: bool, max_attempts: int
) -> tuple[Any, int] | int:
    """``(chunk iterator, requests made)``; or the requests made so far when the answer
    is one ``client.get_object`` knows better (a redirect, a 400 without an S3 code, a
    key obstore's path type cannot hold)."""
    options: dict[str, Any] = {}
    if obj.etag:
        options["if_match"] = f'"{obj.etag}"'
    if not whole:
        options["range"] = (start, end)
    attempt = 0
    while True:
        attempt += 1
        try:
            result = obstore.get(store, obj.key, options=options)  # type: ignore[arg-type]
            return result.stream(min_chunk_size=STREAM_CHUNK), attempt
        except obstore_exc.PreconditionError as exc:
            raise ObjectChangedError(
                "object changed during the run (ETag no longer matches the listing)",
                key=obj.key,
                attempts=attempt,
            ) from exc
        except (obstore_exc.InvalidPathError, ValueError) as exc:
            # A key obstore's path type cannot hold: no request was sent.
            log.debug("s3://%s/%s: %s; using boto3", obj.bucket, obj.key, exc)
            return attempt - 1
        except Exception as exc:
            status, code = _failure(exc)
            retryable = status is None or status >= 500 or status == 429 or code in _RETRY_CODES
            if retryable and attempt < max_attempts:
                time.sleep(_backoff(attempt))
                continue
            if retryable or (400 < status < 500 and code):  # type: ignore[operator]
                raise DownloadError(
                    f"GET failed: {code or status or _first_line(exc)}",
                    key=obj.key,
                    attempts=attempt,
                    retryable=code not in _FINAL_GET_CODES,
                ) from exc
            return attempt


def _first_line(exc: BaseException) -> str:
    return str(exc).split("\n", 1)[0][:300]


def _get_boto(client: Any, obj: S3Object, byte_range: str | None) -> tuple[Any, int]:
    """GET one object (or range) with ``client.get_object``, pinned with If-Match."""
    kwargs: dict[str, Any] = {"Bucket": obj.bucket, "Key": obj.key}
    if obj.etag:
        kwargs["IfMatch"] = f'"{obj.etag}"'
    if byte_range:
        kwargs["Range"] = byte_range
    try:
        resp = client.get_object(**kwargs)
    except bce.ClientError as exc:
        code = error_code(exc)
        if code in ("PreconditionFailed", "412"):
            raise ObjectChangedError(
                "object changed during the run (ETag no longer matches the listing)",
                key=obj.key,
                attempts=attempts_of(exc),
            ) from exc
        retryable = code not in _FINAL_GET_CODES
        raise DownloadError(
            f"GET failed: {code or exc}",
            key=obj.key,
            attempts=attempts_of(exc),
            retryable=retryable,
        ) from exc
    except bce.BotoCoreError as exc:
        raise DownloadError(f"GET failed: {exc}", key=obj.key, attempts=1) from exc
    return _chunks(resp["Body"]), int(resp["ResponseMetadata"].get("RetryAttempts", 0)) + 1


def _chunks(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()


def get_attempts(settings: Settings) -> int:
    """Requests per GET: ``s3_max_attempts`` retries after the first, as botocore counts
    them for the listing."""
    return settings.s3_max_attempts + 1


def _obstore_key(key: str) -> bool:
    """Whether obstore's path type names ``key`` exactly (it strips outer slashes and
    rejects empty, ``.`` and ``..`` segments; such keys are error rows before any GET)."""
    return not key.startswith("/") and not key.endswith("/")


def _get(client: Any, obj: S3Object, start: int, end: int, max_attempts: int) -> tuple[Any, int]:
    """GET bytes ``start..end-1`` of ``obj`` pinned to the listed version with If-Match:
    ``(iterator of chunks, requests made)``."""
    whole = start == 0 and end == obj.size
    made = 0
    store = object_store(client, obj.bucket) if _obstore_key(obj.key) else None
    if store is not None:
        got = _get_obstore(store, obj, start, end, whole, max_attempts)
        if not isinstance(got, int):
            return got
        made = got
    chunks, boto_made = _get_boto(client, obj, None if whole else f"bytes={start}-{end - 1}")
    return chunks, made + boto_made


def _stream(
    client: Any,
    obj: S3Object,
    start: int,
    end: int,
    write: Callable[[int, bytes], None],
    stream_retries: int,
    max_attempts: int,
) -> int:
    """Copy bytes ``start..end-1`` of ``obj`` through ``write(offset, chunk)``.

    A body that breaks mid-transfer is resumed from the last byte written.
    Returns the number of requests made.
    """
    attempts = 0
    offset = start
    for resume in range(stream_retries + 1):
        chunks, made = _get(client, obj, offset, end, max_attempts)
        attempts += made
        try:
            for chunk in chunks:
                if offset + len(chunk) > end:
                    raise IntegrityError(
                        f"body longer than the listed size {obj.size}",
                        key=obj.key,
                        attempts=attempts,
                    )
                write(offset, chunk)
                offset += len(chunk)
        except bce.FlexibleChecksumError as exc:  # botocore's CRC check of the whole body
            raise IntegrityError(
                f"checksum mismatch: {exc}", key=obj.key, attempts=attempts
            ) from exc
        except STREAM_ERRORS as exc:
            log.debug(
                "s3://%s/%s: stream broken at %d (%s), resuming", obj.bucket, obj.key, offset, exc
            )
            if resume == stream_retries:
                raise DownloadError(
                    f"body stream broken {resume + 1} times: {exc}", key=obj.key, attempts=attempts
                ) from exc
            continue
        finally:
            close = getattr(chunks, "close", None)  # boto3's body; obstore's stream just drops
            if close is not None:
                close()
        if offset == end:
            return attempts
        # A body that ended early without an error: resume like a broken stream.
        if resume == stream_retries:
            break
    raise DownloadError(f"body ended at byte {offset} of {end}", key=obj.key, attempts=attempts)


def fetch_small(client: Any, obj: S3Object, dest: Path, root: Path, settings: Settings) -> Fetched:
    """Download one object in one GET (resumed on a broken stream) to ``dest``.

    The bytes go to a temporary file that is renamed over ``dest`` only once
    the size and (for single-part uploads) the MD5 have been checked; a body
    that fails those checks is fetched once more before it becomes an error.
    """
    started = time.perf_counter()
    attempts = 0
    for check in range(INTEGRITY_RETRIES + 1):
        tmp = temp_path(root)
        md5 = hashlib.md5(usedforsecurity=False)
        made = 0  # requests of this pass
        try:
            with open(tmp, "wb") as f:

                def write(offset: int, chunk: bytes, f: Any = f, md5: Any = md5) -> None:
                    f.write(chunk)
                    md5.update(chunk)

                if obj.size:
                    made = _stream(
                        client,
                        obj,
                        0,
                        obj.size,
                        write,
                        settings.s3_stream_retries,
                        get_attempts(settings),
                    )
            _verify(obj, tmp, md5.hexdigest(), attempts + made)
            _publish(tmp, dest)
            return Fetched(attempts + made, time.perf_counter() - started)
        except IntegrityError as exc:
            tmp.unlink(missing_ok=True)
            # Raised by _stream (made == 0, exc counts this pass) or by _verify.
            attempts += made or exc.attempts
            exc.attempts = attempts
            if check == INTEGRITY_RETRIES:
                raise
            log.info("s3://%s/%s: %s; fetching again", obj.bucket, obj.key, exc)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    raise AssertionError("unreachable")


def _verify(obj: S3Object, tmp: Path, md5_hex: str | None, attempts: int) -> None:
    size = tmp.stat().st_size
    if size != obj.size:
        raise IntegrityError(
            f"size {size} differs from the listed {obj.size}", key=obj.key, attempts=attempts
        )
    if obj.etag and not obj.is_multipart and obj.size:
        if md5_hex is None:
            md5_hex = _file_md5(tmp)
        if md5_hex != obj.etag.lower():
            raise IntegrityError(
                f"MD5 {md5_hex} differs from the ETag {obj.etag}", key=obj.key, attempts=attempts
            )


def _file_md5(path: Path) -> str:
    md5 = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK * 4):
            md5.update(chunk)
    return md5.hexdigest()


def _publish(tmp: Path, dest: Path) -> None:
    """Atomically move a complete file to its final name."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, dest)
    except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
        raise ItemError(
            f"local path conflicts with another key (a file and a folder of the same name): {exc}"
        ) from exc


class BatchDownloader:
    """Download many objects on the shared request pool.

    Small objects are one job each; an object of at least
    ``s3_range_threshold`` bytes is split into range jobs written in place
    (``os.pwrite``) to one temporary file. Memory stays bounded by
    ``concurrency x CHUNK`` whatever the object sizes.
    """

    def __init__(self, client: Any, settings: Settings, root: Path) -> None:
        self.client = client
        self.settings = settings
        self.root = root
        self.pool = request_pool(settings.s3_concurrency)

    def run(
        self, jobs: list[tuple[S3Object, Path]]
    ) -> Iterator[tuple[S3Object, Path, Fetched | BaseException]]:
        """Yield ``(object, dest, Fetched or the error)`` as each object finishes."""
        done: list[tuple[S3Object, Path, Fetched | BaseException]] = []
        cond = threading.Condition()
        total = len(jobs)

        def finish(obj: S3Object, dest: Path, outcome: Fetched | BaseException) -> None:
            with cond:
                done.append((obj, dest, outcome))
                cond.notify()

        for obj, dest in jobs:
            if obj.size >= self.settings.s3_range_threshold:
                self._submit_ranged(obj, dest, finish)
            else:
                fut = self.pool.submit(
                    fetch_small, self.client, obj, dest, self.root, self.settings
                )
                fut.add_done_callback(functools.partial(_deliver, finish, obj, dest))
        yielded = 0
        while yielded < total:
            with cond:
                while not done:
                    cond.wait()
                ready, done[:] = list(done), []
            for item in ready:
                yielded += 1
                yield item

    def _submit_ranged(
        self,
        obj: S3Object,
        dest: Path,
        finish: Callable[[S3Object, Path, Fetched | BaseException], None],
    ) -> None:
        size = self.settings.s3_range_size
        ranges = [(start, min(start + size, obj.size)) for start in range(0, obj.size, size)]
        tmp = temp_path(self.root)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, obj.size)
        state = _Ranged(obj, dest, tmp, fd, time.perf_counter(), pending=len(ranges))

        def write(offset: int, chunk: bytes) -> None:
            os.pwrite(fd, chunk, offset)

        def one_range(start: int, end: int) -> int:
            if state.error is not None:  # another range failed: do not spend requests
                return 0
            return _stream(
                self.client,
                obj,
                start,
                end,
                write,
                self.settings.s3_stream_retries,
                get_attempts(self.settings),
            )

        def range_done(fut: Future[int]) -> None:
            outcome = _outcome(fut)
            with state.lock:
                if isinstance(outcome, BaseException):
                    state.error = state.error or outcome
                    if isinstance(outcome, ItemError):
                        state.attempts += outcome.attempts
                else:
                    state.attempts += outcome
                state.pending -= 1
                last = state.pending == 0
            if last:
                # Verification hashes the whole file: run it off the callback thread's hot path
                # only once, when every range is in.
                finish(obj, dest, self._finish_ranged(state))

        for start, end in ranges:
            self.pool.submit(one_range, start, end).add_done_callback(range_done)

    def _finish_ranged(self, state: _Ranged) -> Fetched | BaseException:
        try:
            os.close(state.fd)
            if state.error is not None:
                raise state.error
            _verify(state.obj, state.tmp, None, state.attempts)
            _publish(state.tmp, state.dest)
            return Fetched(state.attempts, time.perf_counter() - state.started)
        except BaseException as exc:
            state.tmp.unlink(missing_ok=True)
            if isinstance(exc, ItemError) and not exc.attempts:
                exc.attempts = state.attempts
            return exc


def _deliver(
    finish: Callable[[S3Object, Path, Fetched | BaseException], None],
    obj: S3Object,
    dest: Path,
    fut: Future[Any],
) -> None:
    finish(obj, dest, _outcome(fut))


def _outcome(fut: Future[Any]) -> Any:
    exc = fut.exception()
    return exc if exc is not None else fut.result()
