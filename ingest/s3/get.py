"""Object GETs on obstore, with ``client.get_object`` as the fallback.

The data path (``GetObject``) goes through obstore (the Python bindings of Rust's
``object_store``): one ``S3Store`` per run's connection and bucket
(``ingest.s3.client.S3Connection.store``), with the boto3 session's credentials (the
standard AWS chain or a Prefect ``AwsCredentials`` block, refreshed through
``get_frozen_credentials``), the endpoint and region of the client, path-style
addressing for custom endpoints, ``allow_http`` for ``http://`` endpoints, the
client's timeouts and a connection pool as large as the client's. Measured on 64
threads, ~30 KB objects, 20 ms of latency: ~0.3-0.4 ms of client CPU per GET
against ~0.7 ms for botocore's SigV4 signer on the client's urllib3 session (the
previous path) and ~1.8 ms for ``client.get_object`` (see benchmarks/README.md).
obstore's blocking ``get`` releases the GIL, so the GETs stay on the run's request
lanes, a thread pool shared by its batch tasks (``S3Connection.lanes``); ``get_async``
on one event loop cost more CPU per GET (~0.55-0.6 ms).

The first two retry layers (see ``ingest.s3``) live here: ``_get_obstore`` retries
each request, ``_stream`` resumes a body broken mid-transfer.

A failed GET is classified by obstore's exception types first (``_classify``):
``PreconditionError`` (412: the object changed), ``FileNotFoundError`` (404),
``PermissionDeniedError`` (403), ``UnauthenticatedError`` (401). obstore raises
``GenericError`` both for other non-2xx answers and for transport failures, and
exposes no status attribute (pyo3-object_store's ``error.rs`` formats the
``object_store`` error into the message); so for it the HTTP status is read from
the status line object_store reports ("status code: 503 ..."), and a transport
failure is object_store's ``HTTP error`` variant. Retried here: 5xx, 429, S3's
throttling codes and transport failures. Anything else obstore raises, and
answers the GET path does not handle itself (a redirect, a 400 without an error
code), go once through ``client.get_object``, whose botocore retries and error
codes then decide; keys obstore's path type cannot name and connections over a
client built elsewhere go there too.
"""

from __future__ import annotations

import logging
import re
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import botocore.exceptions as bce
import obstore
import obstore.exceptions as obstore_exc
from obstore.store import S3Store
from urllib3.exceptions import ProtocolError

from ingest.backoff import Backoff
from ingest.errors import DownloadError, IntegrityError
from ingest.records import S3Object
from ingest.s3.client import S3Connection
from ingest.s3.errors import attempts_of, credentials_error, error_code, object_changed, refusal
from ingest.settings import S3Settings

log = logging.getLogger(__name__)

CHUNK = 1024 * 1024
# obstore gathers a body into chunks of at least this size (and copies each into Python):
# two buffers per request in flight, so kept smaller than CHUNK to bound memory.
STREAM_CHUNK = 256 * 1024

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
# obstore's GenericError carries an answer's status only in object_store's message.
_STATUS_RE = re.compile(r"status code: (\d{3})")
_CODE_RE = re.compile(r"<Code>([^<]{1,128})</Code>")
# object_store's HttpError (connect, send, body, timeout) is displayed as "HTTP error: ...".
_TRANSPORT = "HTTP error:"
_FINAL_TYPES: dict[type[BaseException], tuple[int, str]] = {
    FileNotFoundError: (404, "NoSuchKey"),
    obstore_exc.NotFoundError: (404, "NoSuchKey"),
    obstore_exc.PermissionDeniedError: (403, "AccessDenied"),
    obstore_exc.UnauthenticatedError: (401, "Unauthenticated"),
}

Verdict = Literal["retry", "final", "fallback"]
BACKOFF_BASE = 1.0  # seconds: full jitter over min(cap, base x 2^(attempt-1)), as botocore
BACKOFF_CAP = 20.0


def _classify(exc: BaseException) -> tuple[Verdict, int | None, str]:
    """What to do with a failed obstore GET, with the HTTP status and S3 error code:
    ``retry`` (5xx, 429, throttling, transport), ``final`` (an error answer naming its
    S3 code: an error row, not worth another request), ``fallback`` (let
    ``client.get_object`` make the request: a redirect, a 400 without a code, or an
    error obstore has no type for)."""
    text = str(exc)
    found = _CODE_RE.search(text)
    code = found.group(1) if found else ""
    for kind, (status, default_code) in _FINAL_TYPES.items():
        if isinstance(exc, kind):
            return "final", status, code or default_code
    if not isinstance(exc, obstore_exc.GenericError):
        return "fallback", None, ""
    line = _STATUS_RE.search(text)
    if line is None:
        return ("retry" if _TRANSPORT in text else "fallback"), None, ""
    status = int(line.group(1))
    if status >= 500 or status == 429 or code in _RETRY_CODES:
        return "retry", status, code
    if 400 <= status < 500 and code:
        return "final", status, code
    return "fallback", status, code


# Full jitter, as botocore's standard mode; attempts are counted by the caller.
GET_BACKOFF = Backoff(base=BACKOFF_BASE, cap=BACKOFF_CAP, jitter=1.0)


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
            if end - start <= STREAM_CHUNK:  # one chunk: the body in one call, no iterator
                return _body(result), attempt
            return result.stream(min_chunk_size=STREAM_CHUNK), attempt
        except obstore_exc.PreconditionError as exc:
            raise object_changed(obj.key, attempt) from exc
        except (obstore_exc.InvalidPathError, ValueError) as exc:
            # A key obstore's path type cannot hold: no request was sent.
            log.debug("s3://%s/%s: %s; using boto3", obj.bucket, obj.key, exc)
            return attempt - 1
        except Exception as exc:
            verdict, status, code = _classify(exc)
            if (expired := credentials_error(code, obj.bucket, obj.key)) is not None:
                raise expired from exc
            if verdict == "retry" and attempt < max_attempts:
                time.sleep(GET_BACKOFF.delay(attempt))
                continue
            if verdict == "fallback":
                log.info(
                    "s3://%s/%s: %s from obstore (%s); asking boto3",
                    obj.bucket,
                    obj.key,
                    type(exc).__name__,
                    _first_line(exc),
                )
                return attempt
            answer = " ".join(str(x) for x in (status, code) if x)
            raise DownloadError(
                f"GET failed: {answer or _first_line(exc)}",
                key=obj.key,
                attempts=attempt,
                retryable=verdict == "retry",
            ) from exc


def _body(result: Any) -> Iterator[Any]:
    """The whole body of a small answer as one chunk; read when iterated, so a body that
    breaks is resumed like a broken stream (``_stream``)."""
    yield result.bytes()


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
        if (final := refusal(exc, obj.bucket, obj.key, attempts_of(exc))) is not None:
            raise final from exc
        code = error_code(exc)
        raise DownloadError(
            f"GET failed: {code or exc}",
            key=obj.key,
            attempts=attempts_of(exc),
            retryable=code not in _FINAL_GET_CODES,
        ) from exc
    except bce.BotoCoreError as exc:
        raise DownloadError(f"GET failed: {exc}", key=obj.key, attempts=1) from exc
    return _chunks(resp["Body"]), int(resp["ResponseMetadata"].get("RetryAttempts", 0)) + 1


def _chunks(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()


def get_attempts(s3: S3Settings) -> int:
    """Requests per GET: ``s3_max_attempts`` retries after the first, as botocore counts
    them for the listing."""
    return s3.max_attempts + 1


def _obstore_key(key: str) -> bool:
    """Whether obstore's path type names ``key`` exactly (it strips outer slashes and
    rejects empty, ``.`` and ``..`` segments; such keys are error rows before any GET)."""
    return not key.startswith("/") and not key.endswith("/")


def _get(conn: S3Connection, obj: S3Object, start: int, end: int) -> tuple[Any, int]:
    """GET bytes ``start..end-1`` of ``obj`` pinned to the listed version with If-Match,
    in at most ``get_attempts`` requests: ``(iterator of chunks, requests made)``."""
    whole = start == 0 and end == obj.size
    made = 0
    store = conn.store(obj.bucket) if _obstore_key(obj.key) else None
    if store is not None:
        got = _get_obstore(store, obj, start, end, whole, get_attempts(conn.settings))
        if not isinstance(got, int):
            return got
        made = got
    chunks, boto_made = _get_boto(conn.client, obj, None if whole else f"bytes={start}-{end - 1}")
    return chunks, made + boto_made


def _stream(
    conn: S3Connection,
    obj: S3Object,
    start: int,
    end: int,
    write: Callable[[int, bytes], None],
) -> int:
    """Copy bytes ``start..end-1`` of ``obj`` through ``write(offset, chunk)``.

    A body that breaks mid-transfer is resumed from the last byte written, up to
    ``s3_stream_retries`` times. Returns the number of requests made.
    """
    attempts = 0
    offset = start
    stream_retries = conn.settings.stream_retries
    for resume in range(stream_retries + 1):
        chunks, made = _get(conn, obj, offset, end)
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
