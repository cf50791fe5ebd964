"""The project's one error tree: every exception class of the shipped packages is drawn
here, each name once. The classes of this module are the roots and the S3 download
errors; a concern's own errors live in its module (named at the right) and derive from
these. A class that callers also catch by a built-in kind keeps that base beside
``IngestError`` (``FenceError`` is an ``OSError``, ``ReadOnlyQueryError`` a
``ValueError``), so nothing a user catches or sees changed when they joined the tree.

    IngestError                        base of every error this project raises
    ├── TerminalError                  retrying cannot help: fix configuration first
    │   ├── BucketNotFoundError
    │   ├── AccessDeniedError
    │   ├── CredentialsError
    │   ├── EndpointError              the endpoint cannot be reached at all
    │   ├── ParameterRefusedError      ingest.security: a run parameter this worker refuses
    │   ├── UnsafeFolderError          ingest.s3.files: the temporary folder is a link
    │   ├── InventoryError             ingest.s3.inventory: the report is no listing
    │   │   ├── InventoryNotFoundError
    │   │   ├── InventoryIntegrityError
    │   │   └── UnsupportedInventoryError
    │   └── RestTerminalError          ingest.rest.errors: a 4xx or a configuration
    │       ├── AuthError              401: the credentials are wrong or expired
    │       ├── NotFoundError          404
    │       ├── RequestError           another 4xx
    │       ├── SourceError            the source file is invalid (names the line)
    │       │   └── SchemaContractError  a record broke a frozen schema contract
    │       └── TooManyFailedPagesError  flows.rest_ingest: past max_failed_ratio
    ├── ItemError                      one item failed; becomes an error row
    │   ├── UnsafeKeyError             the key cannot be mapped inside the download folder
    │   ├── IntegrityError             size, MD5, multipart ETag or checksum differs
    │   ├── ObjectChangedError         the object changed while it was being read
    │   ├── DownloadError              retries exhausted (``retryable`` says whether
    │   │   │                          a later run may succeed)
    │   │   └── NotFetchedError        never sent: the run was interrupted (no row:
    │   │                              the next run finds the object new)
    │   ├── ExtractError               ingest.extract.base: a document cannot be read
    │   │   ├── EncryptedDocumentError
    │   │   └── UnsupportedFormatError
    │   └── PageError                  ingest.rest.errors: a page failed after its retries
    │       ├── MalformedPageError     not JSON, records missing, a repeating cursor
    │       │   └── StepError          a processing_steps function raised on a record
    │       ├── PageTooLargeError      a body past max_page_bytes
    │       └── HopRefusedError        a redirect or next page to a host not allowed
    ├── RateLimitStop                  ingest.rest.errors: the budget resets past max_wait
    ├── TooManyFailuresError           flows.s3_ingest: past max_failed_ratio
    ├── NightlyFailedError             flows.nightly: a child ingestion failed
    ├── MissingFieldError              ingest.rest.paging (also a ValueError)
    ├── SharedLimitsError              ingest.rest.shared (also a RuntimeError)
    ├── FenceError                     ingest.extract.fence (also an OSError)
    ├── ReadOnlyQueryError             ingest.storage.warehouse (also a ValueError)
    ├── CatalogNotLoadedError          ingest.storage.tables (also a RuntimeError)
    ├── ServeAuthError                 deployments.auth (also a RuntimeError)
    ├── DeployStepError                deployments.steps (also a RuntimeError)
    ├── ServerStartError               deployments.local_api (also a RuntimeError)
    ├── DatabaseUrlError               deployments.database (also a ValueError)
    └── AlertConfigError               deployments.alerts (also a ValueError)

Library errors are translated at one boundary per library: botocore's in
``ingest.s3.errors.translate_errors``, httpx's in ``ingest.rest.client.RestClient.get``.
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
