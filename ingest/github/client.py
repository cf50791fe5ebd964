"""What is GitHub's own in talking to its API: the headers it expects and the client
built from the shared REST client (``ingest.rest.client``), whose window, governor
and retry policy every REST source uses.

The token travels only in the ``Authorization`` header, only to the API's own
host (``ingest.rest.client.OriginAuth``), and is registered with ``ingest.redact``.
"""

from __future__ import annotations

import httpx

from ingest import __version__
from ingest.redact import register_secret
from ingest.rest.client import Answer, RestClient, safe_url
from ingest.rest.client import make_http as _make_http

API_VERSION = "2022-11-28"
AUTH_HINT = "the token may be wrong or expired: check the GITHUB_TOKEN variable or the Secret block"

GitHubClient = RestClient

__all__ = ["AUTH_HINT", "Answer", "GitHubClient", "make_http_client", "safe_url"]


def make_http_client(
    base_url: str,
    token: str | None,
    *,
    concurrency: int,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """The one shared client: GitHub's headers, keep-alive pool sized to the largest window."""
    register_secret(token)
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
        "User-Agent": f"nightly-ingest/{__version__}",
    }
    return _make_http(
        base_url,
        headers=headers,
        concurrency=concurrency,
        timeout=timeout,
        transport=transport,
        # to the API's host only, never to another host a Link header names
        credentials={"Authorization": f"Bearer {token}"} if token else None,
    )
