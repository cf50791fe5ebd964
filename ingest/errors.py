"""The project's error hierarchy.

    IngestError                  base of every error this project raises
    ├── TerminalError            retrying cannot help: fix configuration first
    │   ├── BucketNotFoundError
    │   ├── AccessDeniedError
    │   ├── CredentialsError
    │   └── EndpointError        the endpoint cannot be reached at all
    └── ItemError                one item failed; becomes an error row
        ├── UnsafeKeyError       the key cannot be mapped inside the download folder
        ├── IntegrityError       size, MD5, multipart ETag or checksum differs
        ├── ObjectChangedError   the object changed while it was being read
        └── DownloadError        retries exhausted (``retryable`` says whether
            │                    a later run may succeed)
            └── NotFetchedError  never sent: the run was interrupted (no row:
                                 the next run finds the object new)

Library errors (botocore) are translated at one boundary, ``ingest.s3.errors.translate_errors``.
"""

from __future__ import annotations


class IngestError(Exception):
    """Base of every error this project raises."""

    retryable: bool = False
    # A report of failures whose tracebacks the runs where they happened logged (the
    # nightly's "s3-ingest failed: ..."): its own lines keep the message, not a traceback
    # of the line that raised the report (tasks.logs.OneTraceback).
    reports_failures: bool = False


class TerminalError(IngestError):
    """Systemic: the run stops at once, with what to fix in the message."""


class BucketNotFoundError(TerminalError):
    pass


class AccessDeniedError(TerminalError):
    pass


class CredentialsError(TerminalError):
    pass


class EndpointError(TerminalError):
    pass


class ItemError(IngestError):
    """One object (or page) failed; it becomes a row with this message."""

    def __init__(self, message: str, *, key: str | None = None, attempts: int = 1) -> None:
        super().__init__(message)
        self.key = key
        self.attempts = attempts


class UnsafeKeyError(ItemError):
    pass


class IntegrityError(ItemError):
    retryable = True


class ObjectChangedError(ItemError):
    retryable = True


class DownloadError(ItemError):
    def __init__(
        self, message: str, *, key: str | None = None, attempts: int = 1, retryable: bool = True
    ) -> None:
        super().__init__(message, key=key, attempts=attempts)
        self.retryable = retryable


class NotFetchedError(DownloadError):
    """The request was never sent because the run was interrupted (Ctrl-C)."""
