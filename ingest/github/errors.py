"""Errors of the GitHub source, in the project's hierarchy (``ingest.errors``).

    IngestError
    ├── TerminalError
    │   └── GitHubTerminalError         retrying cannot help; the message says what to fix
    │       ├── BadCredentialsError     401: the token is wrong or expired (stops the run)
    │       ├── RepoNotFoundError       404: no such repository, or not visible to the token
    │       └── GitHubRequestError      another 4xx (403 without a rate limit, 422 ...)
    └── ItemError
        └── PageError                   one page failed after its retries; becomes a row
    RateLimitStop (IngestError)         the primary budget is spent and resets later than
                                        max_wait: stop cleanly, keep what was fetched

Every message is built from a sanitised URL (``ingest.github.client.safe_url``)
and passed through ``ingest.redact.redact``; the token never reaches an error.
httpx errors are translated at one boundary, ``ingest.github.client.GitHubClient.get``.
"""

from __future__ import annotations

from ingest.errors import IngestError, ItemError, TerminalError
from ingest.redact import redact


class GitHubTerminalError(TerminalError):
    """A 4xx answer that no retry can fix."""

    def __init__(self, message: str, *, url: str = "", status: int | None = None) -> None:
        super().__init__(redact(message))
        self.url = redact(url)
        self.status = status


class BadCredentialsError(GitHubTerminalError):
    pass


class RepoNotFoundError(GitHubTerminalError):
    pass


class GitHubRequestError(GitHubTerminalError):
    pass


class PageError(ItemError):
    """A page that could not be fetched after its retries (5xx, timeouts, secondary limits)."""

    retryable = True

    def __init__(self, message: str, *, url: str, attempts: int = 1) -> None:
        super().__init__(redact(message), key=redact(url), attempts=attempts)
        self.url = redact(url)


class RateLimitStop(IngestError):
    """The primary rate limit is exhausted and resets later than the allowed wait."""

    retryable = True

    def __init__(self, message: str, *, reset_at: float | None = None) -> None:
        super().__init__(message)
        self.reset_at = reset_at
