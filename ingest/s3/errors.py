"""Translation of botocore failures into the project's errors (``ingest.errors``).

Terminal errors (missing bucket, access denied, rejected credentials) are
translated into ``TerminalError`` by ``translate_errors`` and stop the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import botocore.exceptions as bce

from ingest.errors import (
    AccessDeniedError,
    BucketNotFoundError,
    CredentialsError,
    EndpointError,
    ObjectChangedError,
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


def credentials_error(code: str, bucket: str, key: str) -> CredentialsError | None:
    """The run-stopping error for a GET refused because the credentials are no longer
    valid (expired mid-run, revoked), else None: every later request would fail the
    same way, so it is one clear error, not a failed row per remaining object."""
    if _TERMINAL_CODES.get(code) is not CredentialsError:
        return None
    return CredentialsError(
        f"s3://{bucket}/{key}: the credentials stopped working mid-run ({code}); "
        f"{_HINTS[CredentialsError]}, then run again: what was stored is kept"
    )


def object_changed(key: str, attempts: int) -> ObjectChangedError:
    """A GET or HEAD pinned with If-Match to the listed ETag was refused (412)."""
    return ObjectChangedError(
        "object changed during the run (ETag no longer matches the listing)",
        key=key,
        attempts=attempts,
    )


def refusal(exc: bce.ClientError, bucket: str, key: str, attempts: int) -> Exception | None:
    """What a GET or HEAD of ``key`` refused with ``exc`` must raise whatever else the
    caller does with an error: the object changed, or the credentials stopped working
    (``credentials_error``); None for any other answer."""
    code = error_code(exc)
    if code in ("PreconditionFailed", "412"):
        return object_changed(key, attempts)
    return credentials_error(code, bucket, key)


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
        # from None: the message holds what the S3 error said; its botocore traceback
        # would only double what the run's log shows
        raise kind(f"s3://{bucket}: {code or status} ({_HINTS[kind]})") from None
    except (bce.NoCredentialsError, bce.PartialCredentialsError) as exc:
        raise CredentialsError(
            f"s3://{bucket}: no credentials ({_HINTS[CredentialsError]})"
        ) from exc
    except (bce.EndpointConnectionError, bce.ConnectTimeoutError) as exc:
        raise EndpointError(f"s3://{bucket}: {exc} ({_HINTS[EndpointError]})") from exc
