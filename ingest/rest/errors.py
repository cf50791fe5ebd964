"""Errors of the REST sources (GitHub included), in the project's hierarchy (``ingest.errors``).

    IngestError
    ├── TerminalError
    │   └── RestTerminalError           retrying cannot help; the message says what to fix
    │       ├── AuthError               401: the credentials are wrong or expired (stops the run)
    │       ├── NotFoundError           404: no such resource, or not visible to the credentials
    │       ├── RequestError            another 4xx (403 without a rate limit, 422 ...)
    │       └── SourceError             the source file is invalid (names the line)
    └── ItemError
        └── PageError                   one page failed after its retries; becomes a row
            ├── MalformedPageError      a page the API answered but that cannot be read:
            │                           not JSON, records missing, a cursor that repeats
            ├── PageTooLargeError       a body past max_page_bytes (not retried)
            └── HopRefusedError         a redirect or next-page URL to a host not allowed
    RateLimitStop (IngestError)         the primary budget is spent and resets later than
                                        max_wait: stop cleanly, keep what was fetched

Every message is built from a sanitised URL (``ingest.rest.client.safe_url``) and
passed through ``ingest.redact.redact``; a credential never reaches an error.
httpx errors are translated at one boundary, ``ingest.rest.client.RestClient.get``.
"""

from __future__ import annotations

from ingest.errors import IngestError, ItemError, TerminalError
from ingest.redact import redact


class RestTerminalError(TerminalError):
    """A 4xx answer (or a configuration) that no retry can fix."""

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(redact(message))
        self.url = redact(url)
        self.status = status


class AuthError(RestTerminalError):
    pass


class NotFoundError(RestTerminalError):
    pass


class RequestError(RestTerminalError):
    pass


class SourceError(RestTerminalError):
    """The declarative source file is invalid; the message names the file and line."""


class SchemaContractError(SourceError):
    """A record broke a frozen schema contract (``schema_contract: freeze``): the message
    names the table and the field."""


class PageError(ItemError):
    """A page that could not be fetched after its retries (5xx, timeouts, limit answers)."""

    retryable = True

    def __init__(self, message: str, *, url: str, attempts: int = 1) -> None:
        super().__init__(redact(message), key=redact(url), attempts=attempts)
        self.url = redact(url)


class MalformedPageError(PageError):
    """The API answered, but the page cannot be used (bad JSON, no records, a repeating
    cursor). Paging of that listing stops: following it could loop forever."""

    retryable = False


class StepError(MalformedPageError):
    """A ``processing_steps`` function (filter, map) raised on a record, or a map returned
    no mapping: the listing stops, its watermark not advanced, the message naming the
    step, the page and the record."""


class PageTooLargeError(PageError):
    """The answer's body grew past the client's ``max_page_bytes`` while it was read: the
    page is a failed page (the same page would be as large again, so it is not retried)."""

    retryable = False


class HopRefusedError(PageError):
    """A redirect, ``Link`` header or next-page URL named a host the source may not reach
    (not its ``base_url``'s, not in ``INGEST_ALLOWED_HOSTS``): no request went there, and
    the listing is incomplete."""

    retryable = False


class RateLimitStop(IngestError):
    """The primary rate limit is exhausted and resets later than the allowed wait."""

    retryable = True

    def __init__(self, message: str, *, reset_at: float | None = None) -> None:
        super().__init__(message)
        self.reset_at = reset_at
