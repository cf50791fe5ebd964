"""S3 listing and downloading on a shared boto3 client.

Retry layers, one per failure kind:

1. botocore's ``standard`` retry mode retries throttling (503 SlowDown,
   429), 5xx answers and connection errors of each request, with capped
   exponential backoff and jitter (``Settings.s3_max_attempts``).
2. A body stream broken mid-transfer (connection reset, truncated body,
   read timeout) is resumed here with a ``Range`` request from the last byte
   written, up to ``Settings.s3_stream_retries`` times (``STREAM_ERRORS``).
3. Prefect retries a whole batch task (``tasks/s3.py``) with exponential
   backoff and jitter, for failures that no object row can hold (disk full,
   the batch's Parquet file cannot be written).

So one object costs at most ``(s3_max_attempts + 1) x (s3_stream_retries + 1)``
requests per batch attempt (botocore counts ``max_attempts`` as retries after
the first request).

The data path (``GetObject``) is lean: ``FastGet`` signs each request with
botocore's own SigV4 signer and sends it on the client's own HTTP session
(same connection pool, proxies, CA bundle and timeouts), applying botocore's
standard retry policy objects itself. It skips botocore's per-call machinery
(parameter validation, endpoint rules, event hooks, response parsing), which
costs ~1.8 ms of CPU per request against ~0.75 ms here: 5.2-5.8 s against
3.1-3.6 s of client CPU for the benchmark's 2,000 objects, on a 2-core
machine where the S3 server needs the other core (see benchmarks/README.md).
Answers it does not handle itself (redirects, 400s) go through
``client.get_object`` as before.

Terminal errors (missing bucket, access denied, rejected credentials) are
translated into ``TerminalError`` by ``translate_errors`` and stop the run.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import botocore.exceptions as bce
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest, AWSResponse
from botocore.config import Config
from botocore.response import StreamingBody
from botocore.retries import quota
from botocore.retries import standard as retry_standard
from botocore.utils import percent_encode
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
INTEGRITY_RETRIES = 1  # a body failing its size/MD5/CRC check is fetched once more

# Errors raised while reading a response body (s3transfer retries the same set).
STREAM_ERRORS: tuple[type[BaseException], ...] = (
    socket.timeout,
    ConnectionError,
    ProtocolError,
    bce.IncompleteReadError,
    bce.ReadTimeoutError,
    bce.ResponseStreamingError,
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
            session = boto3.session.Session(**(credentials or {}))
            client = session.client(
                "s3",
                endpoint_url=settings.s3_endpoint_url,
                region_name=settings.s3_region or session.region_name or "us-east-1",
                config=config,
            )
            _clients[key] = client
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
_FINAL_GET_CODES = ("NoSuchKey", "AccessDenied", "InvalidObjectState")
_ERROR_CODE = re.compile(rb"<Code>([^<]{1,128})</Code>")
_PROBE_KEY = "ingest-probe-key"


class FastGet:
    """``GetObject`` on a lower-CPU path that keeps botocore's semantics.

    Per request: botocore's ``S3SigV4Auth`` signs an ``AWSRequest`` with the
    client's (refreshable) credentials, and the client's own ``URLLib3Session``
    sends it, so connection pooling, proxies, TLS settings and timeouts are the
    client's. Retries use botocore's ``StandardRetryConditions`` and
    ``ExponentialBackoff`` with the client's total attempts: the same policy
    (5xx, throttling codes such as SlowDown, connection errors) as
    ``client.get_object``. The body is wrapped in botocore's ``StreamingBody``
    (content-length check, botocore's stream exceptions).

    The base URL of a bucket (virtual-hosted or path style, FIPS, dual-stack ...)
    comes once per bucket from the client's endpoint rules, through a presigned
    URL. Answers other than 2xx, 412, a retryable error or a 4xx with an error
    code (a region redirect, a 400) return None and the caller asks
    ``client.get_object``, which handles them.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.http = client._endpoint.http_session
        self.credentials = client._request_signer._credentials
        self.region = client.meta.region_name
        retries = client.meta.config.retries or {}
        self.max_attempts = int(
            retries.get("total_max_attempts") or retries.get("max_attempts") or 3
        )
        self.conditions = retry_standard.StandardRetryConditions(max_attempts=self.max_attempts)
        self.backoff = retry_standard.ExponentialBackoff()
        # The retry quota (a token bucket per client) that stops retry storms in an outage.
        self.quota = retry_standard.RetryQuotaChecker(quota.RetryQuota())
        self.operation = client.meta.service_model.operation_model("GetObject")
        self._bases: dict[str, str] = {}

    @classmethod
    def of(cls, client: Any) -> FastGet | None:
        """The lean path for ``client``, or None when it cannot sign like the client would
        (unsigned or non-SigV4 configuration, no credentials, a private API that moved)."""
        try:
            return client._ingest_fast_get  # type: ignore[no-any-return]
        except AttributeError:
            pass
        with _clients_lock:
            if not hasattr(client, "_ingest_fast_get"):
                fast: FastGet | None = None
                try:
                    if (
                        client.meta.config.signature_version in (None, "s3v4")
                        and client._request_signer._signature_version == "s3v4"
                        and client._request_signer._credentials is not None
                        and client.meta.region_name
                    ):
                        fast = cls(client)
                except AttributeError:
                    fast = None
                client._ingest_fast_get = fast  # lives and dies with the client
            return client._ingest_fast_get  # type: ignore[no-any-return]

    def base_url(self, bucket: str) -> str | None:
        base = self._bases.get(bucket)
        if base is None and not bucket.endswith("--x-s3"):  # S3 Express needs session auth
            try:
                url = self.client.generate_presigned_url(
                    "get_object", Params={"Bucket": bucket, "Key": _PROBE_KEY}, ExpiresIn=60
                )
            except Exception:  # an unusual bucket or configuration: let botocore handle it
                return None
            parts = urlsplit(url)
            if parts.path.endswith("/" + _PROBE_KEY):
                base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len(_PROBE_KEY)]}"
                self._bases[bucket] = base
        return base

    def get(self, obj: S3Object, byte_range: str | None) -> tuple[Any, int] | None:
        """``(body, requests made)``, an ItemError, or None to let boto3 handle the answer."""
        base = self.base_url(obj.bucket)
        if base is None:
            return None
        url = base + percent_encode(obj.key, safe="/~")
        headers: dict[str, str] = {}
        if obj.etag:
            headers["If-Match"] = f'"{obj.etag}"'
        if byte_range:
            headers["Range"] = byte_range
        attempt = 0
        request_context: dict[str, Any] = {}
        while True:
            attempt += 1
            request = AWSRequest(method="GET", url=url, headers=dict(headers))
            frozen = self.credentials.get_frozen_credentials()
            S3SigV4Auth(frozen, "s3", self.region).add_auth(request)
            prepared = request.prepare()
            prepared.stream_output = True
            response: AWSResponse | None = None
            caught: Exception | None = None
            code = ""
            try:
                response = self.http.send(prepared)
            except bce.BotoCoreError as exc:  # connection refused/reset, timeouts
                caught = exc
            if response is not None:
                status = response.status_code
                if status in (200, 206):
                    # botocore passes the request context dict here too (the stubs say otherwise).
                    self.quota.release_retry_quota(request_context, response)  # type: ignore[arg-type]
                    length = response.headers.get("content-length")
                    size = int(length) if length else None  # None: no length check, as botocore
                    return StreamingBody(response.raw, size), attempt  # type: ignore[arg-type]
                match = _ERROR_CODE.search(response.content[:4096])  # reads and releases
                code = match.group(1).decode("utf-8", "replace") if match else ""
                if status == 412:
                    raise ObjectChangedError(
                        "object changed during the run (ETag no longer matches the listing)",
                        key=obj.key,
                        attempts=attempt,
                    )
                if status < 500 and status != 429 and (status <= 400 or not code):
                    return None  # redirects, region errors ...: botocore knows them
            context = retry_standard.RetryContext(
                attempt_number=attempt,
                operation_model=self.operation,
                parsed_response={"Error": {"Code": code}} if code else None,
                http_response=response,
                caught_exception=caught,
                request_context=request_context,
            )
            if self.conditions.is_retryable(context) and self.quota.acquire_retry_quota(context):
                time.sleep(self.backoff.delay_amount(context))
                continue
            if caught is not None:
                raise DownloadError(
                    f"GET failed: {caught}", key=obj.key, attempts=attempt
                ) from caught
            raise DownloadError(
                f"GET failed: {code or status}",
                key=obj.key,
                attempts=attempt,
                retryable=code not in _FINAL_GET_CODES,
            )


def _get(client: Any, obj: S3Object, byte_range: str | None) -> tuple[Any, int]:
    """GET one object (or range) pinned to the listed version with If-Match."""
    fast = FastGet.of(client)
    if fast is not None:
        got = fast.get(obj, byte_range)
        if got is not None:
            return got
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
    return resp["Body"], int(resp["ResponseMetadata"].get("RetryAttempts", 0)) + 1


def _stream(
    client: Any,
    obj: S3Object,
    start: int,
    end: int,
    write: Callable[[int, bytes], None],
    stream_retries: int,
) -> int:
    """Copy bytes ``start..end-1`` of ``obj`` through ``write(offset, chunk)``.

    A body that breaks mid-transfer is resumed from the last byte written.
    Returns the number of requests made.
    """
    attempts = 0
    offset = start
    whole = start == 0 and end == obj.size
    for resume in range(stream_retries + 1):
        byte_range = None if whole and offset == 0 else f"bytes={offset}-{end - 1}"
        body, made = _get(client, obj, byte_range)
        attempts += made
        try:
            for chunk in body.iter_chunks(CHUNK):
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
            body.close()
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
                    made = _stream(client, obj, 0, obj.size, write, settings.s3_stream_retries)
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
                fut.add_done_callback(lambda f, o=obj, d=dest: finish(o, d, _outcome(f)))
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
            return _stream(self.client, obj, start, end, write, self.settings.s3_stream_retries)

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


def _outcome(fut: Future[Any]) -> Any:
    exc = fut.exception()
    return exc if exc is not None else fut.result()
