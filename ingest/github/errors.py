"""Errors of the GitHub source: the REST sources' errors (``ingest.rest.errors``) under
the names the GitHub code and its users know.

    BadCredentialsError   401: the token is wrong or expired (stops the run)
    RepoNotFoundError     404: no such repository, or not visible to the token
    GitHubRequestError    another 4xx (403 without a rate limit, 422 ...)
    PageError             one page failed after its retries; becomes a row
    RateLimitStop         the primary budget is spent and resets later than max_wait
"""

from __future__ import annotations

from ingest.rest.errors import AuthError as BadCredentialsError
from ingest.rest.errors import NotFoundError as RepoNotFoundError
from ingest.rest.errors import PageError, RateLimitStop
from ingest.rest.errors import RequestError as GitHubRequestError
from ingest.rest.errors import RestTerminalError as GitHubTerminalError

__all__ = [
    "BadCredentialsError",
    "GitHubRequestError",
    "GitHubTerminalError",
    "PageError",
    "RateLimitStop",
    "RepoNotFoundError",
]
