"""HTTP for every REST source (GitHub included): one shared ``httpx.AsyncClient``, the
adaptive in-flight window, the rate-limit governor and the retry policy, in one place.

``RestClient.get`` is the single boundary where httpx errors and HTTP statuses
become the project's errors (``ingest.rest.errors``):

* 200 and 304 are answers; every request, including each retry, becomes an
  ``ApiRequest`` row (sanitised URL, status, seconds, bytes, from_cache,
  remaining budget).
* 401 -> ``AuthError``; 404 -> ``NotFoundError``; 403/429 with a spent budget
  (``remaining: 0``, no ``Retry-After``) -> wait for the reset or stop
  (governor); other 403/429 with ``Retry-After``, a "rate limit" message, or
  any 429 -> a limit answer: the window shrinks, every request pauses exactly
  ``Retry-After`` seconds, the request is retried; other 4xx -> ``RequestError``.
* 5xx, timeouts, broken connections and bodies that are not JSON ->
  ``RetryPolicy``; after the last attempt ``PageError`` (``MalformedPageError``
  for a body that never parsed, ``EndpointError`` when the host never answered).

Credentials travel only in headers or the query; they are registered with
``ingest.redact`` and every URL and message passes ``safe_url``/``redact``
before it is logged or stored. Redirects are followed here, not by httpx
(``_MAX_REDIRECTS`` hops): a hop to another origin (scheme, host, port) goes out
without any credential the client added, header (``OriginAuth``) or query
parameter (``auth_params``), so an ``X-API-Key`` never reaches a host the API
redirects to; and a hop (a redirect, a ``Link`` header, a body's next URL) to a host:port
other than the base URL's or one of ``allowed_hops`` (``INGEST_ALLOWED_HOSTS``) is
refused before any request (``HopRefusedError``: the listing is incomplete).

A page body is read as a stream and given up past ``max_page_bytes`` (a
``PageError`` at once: a retry would read the same page) or when the whole answer takes
longer than ``body_deadline`` (a timeout, retried as one); a ``Retry-After`` longer than
``max_retry_after`` fails its page at once instead of pausing the source; a body nested too deep
for the parser (``RecursionError``) is a malformed page like any other, never a
failed run.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import httpx

from ingest.errors import EndpointError
from ingest.redact import redact
from ingest.rest.errors import (
    AuthError,
    HopRefusedError,
    MalformedPageError,
    NotFoundError,
    PageError,
    PageTooLargeError,
    RequestError,
    RestTerminalError,
)
from ingest.rest.ratelimit import RateLimitGovernor, RetryPolicy, parse_budget
from ingest.rest.records import ApiRequest, RestSummary
from ingest.rest.transport import OriginAuth, origin, safe_url
from ingest.rest.window import AdaptiveWindow, Outcome
from ingest.security import endpoint_of

if TYPE_CHECKING:
    from ingest.rest.shared import SharedSlots

log = logging.getLogger(__name__)

# Redirect hops one request follows before it is an error (httpx's default is 20).
_MAX_REDIRECTS = 5
_REDIRECTS = (301, 302, 303, 307, 308)

# The primary limit answers with this many consecutive 403/429s at most before a
# request gives up (each one makes the governor wait for the reset or stop).
_MAX_PRIMARY_HITS = 3


def _untrusted_certificate(error: BaseException | None) -> bool:
    while error is not None:
        if isinstance(error, ssl.SSLCertVerificationError):
            return True
        error = error.__cause__ or error.__context__
    return False


# the response extension ``_read`` puts the request's time on the wire in
WIRE_SECONDS = "ingest.wire_seconds"


@dataclass(slots=True)
class Answer:
    """A successful answer: 200 with its decoded body, or 304 (``data`` is None)."""

    url: str
    status: int
    headers: httpx.Headers
    data: Any
    attempts: int
    # the answering attempt's time on the wire: from the request's first byte sent to the
    # body's last read, without the connection's set-up or a wait for the event loop to
    # send it (what the host took; the page plans are fitted to it)
    wire_seconds: float = 0.0

    @property
    def not_modified(self) -> bool:
        return self.status == 304

    @property
    def etag(self) -> str | None:
        return self.headers.get("etag")


@dataclass(slots=True)
class _Sent:
    """One attempt's outcome, as ``RestClient._send`` saw it."""

    response: httpx.Response | None = None
    error: BaseException | None = None
    bad_json: ValueError | RecursionError | None = None
    data: Any = None
    outcome: Outcome = "error"
    seconds: float = 0.0
    wire_seconds: float = 0.0
    sent_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class RestClient:
    """Sends the requests of a run to one host, within its window and its budget."""

    http: httpx.AsyncClient
    governor: RateLimitGovernor
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    concurrency: int = 32
    secondary_retries: int = 5
    run_id: str = ""
    window: AdaptiveWindow | None = None
    auth_hint: str = "check the credentials"
    who: str = "these credentials"  # what a 404 may not be visible to
    auth_params: dict[str, str] = field(default_factory=dict)  # a credential in the query
    max_page_bytes: int = 64 * 1024 * 1024  # a body longer than this is a failed page
    body_deadline: float = 120.0  # seconds for a whole answer, from request to last byte
    # endpoints (host:port, or a bare host) a redirect or next-page URL may go to besides
    # the base URL's own: INGEST_ALLOWED_HOSTS; any other host is refused before a request
    allowed_hops: frozenset[str] = frozenset()
    max_retry_after: float = 300.0  # a longer Retry-After fails the page, pausing nothing
    requests: list[ApiRequest] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    # the cluster's in-flight slots of the host (``ingest.rest.shared``); None: this
    # process's window alone limits what is in flight
    shared: SharedSlots | None = None

    def __post_init__(self) -> None:
        if self.window is None:
            self.window = AdaptiveWindow(maximum=self.concurrency)

    def tally(self, summary: RestSummary) -> None:
        """Put what this client saw into the run's ``summary``: its requests and limit
        answers (403, 429), the most in flight, the window and ceiling it ends with."""
        assert self.window is not None
        summary.requests = len(self.requests)
        summary.limit_answers = sum(1 for r in self.requests if r.status in (403, 429))
        summary.max_in_flight = self.max_in_flight
        summary.window, summary.ceiling = self.window.remembered()

    async def get(
        self,
        url: str,
        *,
        label: str = "",
        etag: str | None = None,
        params: Mapping[str, Any] | None = None,
        paced: bool = True,
    ) -> Answer:
        """GET ``url`` (absolute, or relative to the base URL) with retries; see the module doc.

        ``paced=False`` for a request unlike the listing's pages (a one-item probe, a
        conditional look at page 1): its latency is not a sample of the window's
        queueing signal, which compares answers with the fastest seen, and a 90 ms probe
        beside 900 ms pages would read as a server queueing tenfold.
        """
        failures = secondary = primary = attempt = 0
        while True:
            attempt += 1
            sent = await self._send(url, etag, params, paced)
            response = sent.response
            target = safe_url(response.request.url if response is not None else url)
            error = sent.bad_json or sent.error
            self._log_request(label, target, sent, attempt, error)
            why: object = error  # what a retry is after
            if isinstance(sent.error, (PageTooLargeError, HopRefusedError, RequestError)):
                raise sent.error
            if _untrusted_certificate(sent.error):  # retrying cannot change the certificate
                raise EndpointError(
                    f"{target}: the server's TLS certificate is not trusted ({sent.error}); "
                    "for a private certificate authority set SSL_CERT_FILE to its CA bundle"
                )
            if response is not None and sent.bad_json is None:
                headers, status = response.headers, response.status_code
                if status in (200, 304):
                    self.governor.succeeded()
                    return Answer(target, status, headers, sent.data, attempt, sent.wire_seconds)
                if status in (403, 429) and _budget_spent(headers):
                    primary += 1
                    self.governor.primary_exhausted()
                    if primary > _MAX_PRIMARY_HITS:
                        raise PageError(
                            f"{target}: primary rate limit persists", url=target, attempts=attempt
                        )
                    continue  # the governor waits for the reset, or stops the run
                if status in (403, 429) and sent.outcome == "limit":
                    secondary += 1
                    retry_after = _retry_after(headers)
                    self._check_pause(target, status, secondary, retry_after, attempt)
                    await self.governor.secondary_limit(retry_after)
                    continue
                if status < 500:
                    raise self._refused(target, status, _message(response), label)
                why = f"HTTP {status}"
            failures += 1  # 5xx, a timeout, a broken connection, a body that is not JSON
            if failures < self.retry.max_attempts:
                await self._wait(self.retry.delay(failures), target, f"{why}")
                continue
            if sent.bad_json is not None:
                raise MalformedPageError(
                    f"{target}: the answer is not JSON after {failures} attempts ({sent.bad_json})",
                    url=target,
                    attempts=attempt,
                )
            if isinstance(error, httpx.ConnectError):
                raise EndpointError(
                    f"{target}: cannot connect after {failures} attempts "
                    f"({error}); check base_url and the network"
                )
            raise PageError(
                f"{target}: {why} after {failures} attempts", url=target, attempts=attempt
            )

    def _check_pause(
        self, target: str, status: int, secondary: int, retry_after: float | None, attempt: int
    ) -> None:
        """A limit answer that may not pause the source: one past ``secondary_retries``,
        or a ``Retry-After`` beyond ``max_retry_after`` (the page is given up at once)."""
        if secondary > self.secondary_retries:
            raise PageError(
                f"{target}: rate limited after {secondary} pauses", url=target, attempts=attempt
            )
        if retry_after is not None and retry_after > self.max_retry_after:
            log.warning(
                "%s: Retry-After %.0f s is beyond max_retry_after %.0f s; "
                "the page is given up, no request pauses",
                target,
                retry_after,
                self.max_retry_after,
            )
            raise PageError(
                f"{target}: HTTP {status} asked to wait {retry_after:.0f} s "
                f"(Retry-After), beyond max_retry_after {self.max_retry_after:.0f} s: "
                "the page is given up",
                url=target,
                attempts=attempt,
            )

    def _refused(self, target: str, status: int, message: str, label: str) -> RestTerminalError:
        """A 4xx answer no retry can fix: 401 (the credentials), 404, any other."""
        if status == 401:
            return AuthError(
                f"{target}: 401 {message or 'Unauthorized'}: the credentials were rejected; "
                f"{self.auth_hint}",
                url=target,
                status=status,
            )
        if status == 404:
            return NotFoundError(
                f"{target}: 404 {label or 'resource'} not found, or not visible to {self.who}",
                url=target,
                status=status,
            )
        return RequestError(f"{target}: HTTP {status} {message}".strip(), url=target, status=status)

    async def _send(
        self, url: str, etag: str | None, params: Mapping[str, Any] | None, paced: bool = True
    ) -> _Sent:
        """One attempt, inside the window and the budget."""
        window = self.window
        assert window is not None
        ticket = await window.acquire()
        sent = _Sent()
        start = time.perf_counter()
        admitted = slotted = False
        try:
            if self.shared is not None:
                await self.shared.acquire(window.size)
                slotted = True
            await self.governor.acquire()
            admitted = True
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
            ticket.sent_with = self.in_flight
            sent.sent_at = datetime.now(UTC)
            start = time.perf_counter()
            try:
                response = await self._answer(
                    httpx.URL(url), params, {"If-None-Match": etag} if etag else None
                )
            except (httpx.TimeoutException, httpx.TransportError) as exc:
                sent.error = exc
                sent.outcome = "timeout" if isinstance(exc, httpx.TimeoutException) else "error"
                return sent
            except (PageTooLargeError, HopRefusedError, RequestError) as exc:  # not retried
                sent.error = exc
                return sent
            finally:
                self.in_flight -= 1
                sent.seconds = time.perf_counter() - start
            sent.response = response
            sent.wire_seconds = float(response.extensions.get(WIRE_SECONDS, sent.seconds))
            if response.status_code == 200 and response.content:
                try:
                    sent.data = response.json()
                except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
                    sent.bad_json = exc
            sent.outcome = _outcome(response)
            return sent
        finally:
            await window.release(ticket, sent.outcome, sent.seconds if paced else 0.0)
            if slotted:
                assert self.shared is not None
                await self.shared.release()
            if admitted:
                await self.governor.release(
                    sent.response.headers if sent.response is not None else None
                )

    def _credentialed(self, target: httpx.URL) -> httpx.URL:
        """``target`` with the query credential when it is on the API's origin; on another
        origin, without any parameter that carries a credential of this client, by name or
        by value (a ``Location`` may repeat one)."""
        if target.is_relative_url or origin(target) == origin(self.http.base_url):
            # merged here (httpx's client params replace a query)
            return target.copy_merge_params(self.auth_params) if self.auth_params else target
        secrets = self._secret_values()
        for name, value in target.params.multi_items():
            if name in self.auth_params or any(secret in value for secret in secrets):
                target = target.copy_remove_param(name)
        return target

    def _secret_values(self) -> set[str]:
        values = set(self.auth_params.values())
        auth = self.http.auth
        if isinstance(auth, OriginAuth):
            for value in auth.values():
                values |= {value, value.partition(" ")[2]}  # "Bearer x": also x
        return values - {""}

    async def _answer(
        self, target: httpx.URL, params: Mapping[str, Any] | None, headers: dict[str, str] | None
    ) -> httpx.Response:
        """``_follow`` within ``body_deadline`` in all: httpx's timeout is per read, so a
        body dribbled a byte at a time would never time out. Past the deadline the attempt
        is a timeout (``httpx.ReadTimeout``), retried as one."""
        try:
            async with asyncio.timeout(self.body_deadline):
                return await self._follow(target, params, headers)
        except TimeoutError:
            raise httpx.ReadTimeout(
                f"no whole answer within {self.body_deadline:g} s (body_deadline)"
            ) from None

    async def _follow(
        self, target: httpx.URL, params: Mapping[str, Any] | None, headers: dict[str, str] | None
    ) -> httpx.Response:
        """GET with redirects followed here: each hop's credentials are decided by its own
        origin (``_credentialed``, ``OriginAuth``), never copied from the hop before."""
        hops = 0
        while True:
            self._check_hop(target)
            response = await self._read(self._credentialed(target), params, headers)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECTS or not location:
                return response
            hops += 1
            nxt = response.request.url.join(location)
            if hops > _MAX_REDIRECTS or nxt.scheme not in ("http", "https"):
                why = (
                    "too many redirects" if hops > _MAX_REDIRECTS else "a redirect to " + nxt.scheme
                )
                raise RequestError(
                    f"{safe_url(target)}: {why} (to {safe_url(nxt)})",
                    url=safe_url(target),
                    status=response.status_code,
                )
            if origin(nxt) != origin(response.request.url):
                log.info("redirected to another origin: %s", safe_url(nxt))
            target, params = nxt, None  # the Location is the whole next URL

    def _check_hop(self, target: httpx.URL) -> None:
        """Refuse a URL (a redirect's ``Location``, a ``Link`` header's or a body's next
        page) on a host:port other than the base URL's and the allowed ones: an API must
        not turn the worker into a client of loopback, link-local (cloud metadata) or
        private addresses, nor of any host the operator did not allow."""
        if target.is_relative_url:
            return
        try:
            endpoint = endpoint_of(str(target))
        except ValueError:
            return  # not http(s): the redirect check names the scheme
        if endpoint == endpoint_of(str(self.http.base_url)):
            return
        host = endpoint.rsplit(":", 1)[0].strip("[]")
        if endpoint in self.allowed_hops or host in self.allowed_hops:
            return
        shown = safe_url(target)
        raise HopRefusedError(
            f"{shown}: the API sent the client to {endpoint}, which this source may not "
            "reach (its base_url's host, or INGEST_ALLOWED_HOSTS); nothing was sent there",
            url=shown,
            attempts=1,
        )

    async def _read(
        self, target: httpx.URL, params: Mapping[str, Any] | None, headers: dict[str, str] | None
    ) -> httpx.Response:
        """One GET, its body read as a stream and given up past ``max_page_bytes``."""
        request = self.http.build_request("GET", target, params=params, headers=headers)
        sent_at: list[float] = []

        async def trace(event: str, info: Any) -> None:  # httpcore's request trace
            if event.endswith("send_request_headers.started"):
                sent_at.append(time.perf_counter())

        request.extensions["trace"] = trace
        response = await self.http.send(request, stream=True)
        try:
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_page_bytes:
                    raise PageTooLargeError(
                        f"{safe_url(request.url)}: the answer is larger than "
                        f"{self.max_page_bytes:,} bytes (max_page_bytes); the page is not read",
                        url=safe_url(request.url),
                        attempts=1,
                    )
                chunks.append(chunk)
        finally:
            await response.aclose()
        headers_read = response.headers.copy()
        headers_read.pop("content-encoding", None)  # the body below is already decoded
        read = httpx.Response(
            response.status_code, headers=headers_read, content=b"".join(chunks), request=request
        )
        if sent_at:  # on the wire: from the request's first byte to the body's last
            read.extensions = {WIRE_SECONDS: time.perf_counter() - sent_at[-1]}
        return read

    def _log_request(
        self, label: str, url: str, sent: _Sent, attempt: int, error: BaseException | None
    ) -> None:
        response = sent.response
        budget = parse_budget(response.headers) if response is not None else None
        status = response.status_code if response is not None else None
        err = None
        if error is not None:
            err = redact(f"{type(error).__name__}: {error}")[:300]
        elif response is not None and status not in (200, 304):
            err = redact(f"HTTP {status} {_message(response)}")[:300]
        self.requests.append(
            ApiRequest(
                run_id=self.run_id,
                repo=label,
                url=url,
                status=status,
                seconds=round(sent.seconds, 6),
                bytes=len(response.content) if response is not None else 0,
                from_cache=status == 304,
                rate_remaining=budget[1].remaining if budget else None,
                rate_limit=budget[1].limit if budget else None,
                rate_resource=budget[0] if budget else None,
                attempt=attempt,
                error=err,
                requested_at=sent.sent_at,
            )
        )

    async def _wait(self, seconds: float, url: str, why: str) -> None:
        log.info("retrying %s in %.2f s after %s", url, seconds, redact(why))
        await asyncio.sleep(seconds)


def _budget_spent(headers: Mapping[str, str]) -> bool:
    """A 403/429 that says the primary budget is spent (not a concurrency limit)."""
    parsed = parse_budget(headers)
    return parsed is not None and parsed[1].remaining <= 0 and "retry-after" not in headers


def _outcome(response: httpx.Response) -> Outcome:
    """What an answer says about the window: clean, a limit answer, or neither."""
    status = response.status_code
    if status in (200, 304):
        return "ok"
    if status in (403, 429) and not _budget_spent(response.headers):
        if status == 429 or "retry-after" in response.headers:
            return "limit"
        if "rate limit" in _message(response).lower():
            return "limit"
    return "error"


def _retry_after(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


def _message(response: httpx.Response | None) -> str:
    """The API's ``{"message": ...}`` (or ``error``), sanitised."""
    if response is None:
        return ""
    try:
        data = response.json()
    except (ValueError, RecursionError):
        return ""
    message = None
    if isinstance(data, dict):
        message = data.get("message") or data.get("error")
    return redact(str(message)) if message else ""
