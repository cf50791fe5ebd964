"""HTTP for the GitHub source: one shared ``httpx.AsyncClient``, a global
in-flight limit, the rate-limit governor and the retry policy, in one place.

``GitHubClient.get`` is the single boundary where httpx errors and HTTP
statuses become the project's errors (``ingest.github.errors``):

* 200 and 304 are answers; every request, including each retry, becomes an
  ``ApiRequest`` row (sanitised URL, status, seconds, bytes, from_cache,
  remaining budget).
* 401 -> ``BadCredentialsError``; 404 -> ``RepoNotFoundError``; 403/429 with
  ``x-ratelimit-remaining: 0`` -> wait for the reset or stop (governor);
  403/429 with ``Retry-After`` or a "secondary rate limit" message -> pause
  all requests and retry; other 4xx -> ``GitHubRequestError``.
* 5xx, timeouts and broken connections -> ``RetryPolicy``; after the last
  attempt ``PageError`` (or ``EndpointError`` when the host never answered).

The token travels only in the ``Authorization`` header. It is registered
with ``ingest.redact`` and every URL and message is passed through
``safe_url``/``redact`` before it is logged or stored.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx

from ingest import __version__
from ingest.errors import EndpointError
from ingest.github.errors import (
    BadCredentialsError,
    GitHubRequestError,
    PageError,
    RepoNotFoundError,
)
from ingest.github.ratelimit import RateLimitGovernor, RetryPolicy, parse_budget
from ingest.github.records import ApiRequest
from ingest.redact import redact, register_secret

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
# The primary limit answers with this many consecutive 403/429s at most before a
# request gives up (each one makes the governor wait for the reset or stop).
_MAX_PRIMARY_HITS = 3


def safe_url(url: str | httpx.URL) -> str:
    """A URL fit for logs and tables: no userinfo, no secret query parameters."""
    return redact(str(url))


def make_http_client(
    base_url: str,
    token: str | None,
    *,
    concurrency: int,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> httpx.AsyncClient:
    """The one shared client: keep-alive pool sized to the in-flight limit."""
    register_secret(token)
    headers = {
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
        "User-Agent": f"nightly-ingest/{__version__}",
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return httpx.AsyncClient(
        base_url=base_url,
        verify=_ssl_context(),
        headers=headers,
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        transport=transport,
        follow_redirects=True,
        trust_env=False,
    )


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """httpx's default context (certifi's CA bundle), built once per process (~50 ms)."""
    return httpx.create_ssl_context()


@dataclass(slots=True)
class Answer:
    """A successful answer: 200 with its decoded body, or 304 (``data`` is None)."""

    url: str
    status: int
    headers: httpx.Headers
    data: Any
    attempts: int

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def etag(self) -> str | None:
        return self.headers.get("etag")


@dataclass
class GitHubClient:
    """Sends requests for all repositories of a run, under one in-flight limit."""

    http: httpx.AsyncClient
    governor: RateLimitGovernor
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 32
    secondary_retries: int = 5
    run_id: str = ""
    requests: list[ApiRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0

    def __post_init__(self) -> None:
        self._limit = asyncio.Semaphore(self.concurrency)

    async def get(self, url: str, *, repo: str = "", etag: str | None = None) -> Answer:
        """GET ``url`` (absolute, or relative to the base URL) with retries; see the module doc."""
        failures = secondary = primary = 0
        attempt = 0
        while True:
            attempt += 1
            response, error, seconds, sent_at = await self._send(url, etag)
            headers = response.headers if response is not None else None
            status = response.status_code if response is not None else None
            target = safe_url(response.request.url if response is not None else url)
            self._log_request(repo, target, response, seconds, attempt, error, sent_at)
            if response is None:
                failures += 1
                if failures >= self.retry.max_attempts:
                    if isinstance(error, httpx.ConnectError):
                        raise EndpointError(
                            f"{target}: cannot connect after {failures} attempts "
                            f"({error}); check base_url and the network"
                        )
                    raise PageError(
                        f"{target}: {error} after {failures} attempts", url=target, attempts=attempt
                    )
                await self._wait(self.retry.delay(failures), target, f"{error}")
                continue
            assert headers is not None and status is not None
            if status in (200, 304):
                self.governor.succeeded()
                data = response.json() if status == 200 and response.content else None
                return Answer(target, status, headers, data, attempt)
            message = _message(response)
            if status in (403, 429):
                if headers.get("x-ratelimit-remaining") == "0" and "retry-after" not in headers:
                    primary += 1
                    self.governor.primary_exhausted()
                    if primary > _MAX_PRIMARY_HITS:
                        raise PageError(
                            f"{target}: primary rate limit persists", url=target, attempts=attempt
                        )
                    continue  # the governor waits for the reset, or stops the run
                if (
                    "retry-after" in headers
                    or "secondary rate limit" in message.lower()
                    or status == 429
                ):
                    secondary += 1
                    if secondary > self.secondary_retries:
                        raise PageError(
                            f"{target}: secondary rate limit after {secondary} pauses",
                            url=target,
                            attempts=attempt,
                        )
                    await self.governor.secondary_limit(_retry_after(headers), self.in_flight + 1)
                    continue
            if status == 401:
                raise BadCredentialsError(
                    f"{target}: 401 {message or 'Bad credentials'}: the token was rejected; "
                    "check the GITHUB_TOKEN variable or the Secret block",
                    url=target,
                    status=status,
                )
            if status == 404:
                raise RepoNotFoundError(
                    f"{target}: 404 {repo or 'resource'} not found, or not visible to this token "
                    "(private repositories need a token with access)",
                    url=target,
                    status=status,
                )
            if status >= 500:
                failures += 1
                if failures >= self.retry.max_attempts:
                    raise PageError(
                        f"{target}: HTTP {status} after {failures} attempts",
                        url=target,
                        attempts=attempt,
                    )
                await self._wait(self.retry.delay(failures), target, f"HTTP {status}")
                continue
            raise GitHubRequestError(
                f"{target}: HTTP {status} {message}".strip(), url=target, status=status
            )

    async def _send(
        self, url: str, etag: str | None
    ) -> tuple[httpx.Response | None, BaseException | None, float, datetime]:
        async with self._limit:
            await self.governor.acquire()
            headers: Mapping[str, str] | None = None
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            sent_at = datetime.now(UTC)
            start = time.perf_counter()
            try:
                response = await self.http.get(
                    url, headers={"If-None-Match": etag} if etag else None
                )
                headers = response.headers
                return response, None, time.perf_counter() - start, sent_at
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                return None, exc, time.perf_counter() - start, sent_at
            finally:
                self.in_flight -= 1
                await self.governor.release(headers)

    def _log_request(
        self,
        repo: str,
        url: str,
        response: httpx.Response | None,
        seconds: float,
        attempt: int,
        error: BaseException | None,
        sent_at: datetime,
    ) -> None:
        budget = parse_budget(response.headers) if response is not None else None
        status = response.status_code if response is not None else None
        err = None
        if error is not None:
            err = redact(f"{type(error).__name__}: {error}")[:300]
        elif status is not None and status not in (200, 304):
            err = (
                redact(f"HTTP {status} {_message(response)}")[:300]
                if response is not None
                else None
            )
        self.requests.append(
            ApiRequest(
                run_id=self.run_id,
                repo=repo,
                url=url,
                status=status,
                seconds=round(seconds, 6),
                bytes=len(response.content) if response is not None else 0,
                from_cache=status == 304,
                rate_remaining=budget[1].remaining if budget else None,
                rate_limit=budget[1].limit if budget else None,
                rate_resource=budget[0] if budget else None,
                attempt=attempt,
                error=err,
                requested_at=sent_at,
            )
        )

    async def _wait(self, seconds: float, url: str, why: str) -> None:
        log.info("retrying %s in %.2f s after %s", url, seconds, redact(why))
        await asyncio.sleep(seconds)


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _message(response: httpx.Response | None) -> str:
    """GitHub's ``{"message": ...}``, sanitised."""
    if response is None:
        return ""
    try:
        data = response.json()
    except ValueError:
        return ""
    message = data.get("message") if isinstance(data, dict) else None
    return redact(str(message)) if message else ""
