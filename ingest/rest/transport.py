"""The httpx client of a source: TLS from the environment's CA bundle, built once per
process (``ssl_context``, ``warm_up``), a keep-alive pool sized to the window and split
into shards (``ShardedTransport``), and credential headers sent to the API's origin
only (``OriginAuth``). ``ingest.rest.client.RestClient`` sends every request through it.
"""

from __future__ import annotations

import functools
import logging
import os
import ssl
import threading
from collections.abc import Generator, Mapping
from typing import Any

import httpx

from ingest.redact import redact

log = logging.getLogger(__name__)


@functools.cache
def _ssl_context(cafile: str | None, capath: str | None) -> ssl.SSLContext:
    del cafile, capath  # the cache key: httpx reads the same variables
    return httpx.create_ssl_context(trust_env=True)


_ssl_lock = threading.Lock()  # a second caller waits for the context being built


def ssl_context() -> ssl.SSLContext:
    """httpx's default context: certifi's CA bundle, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``
    when set (a private certificate authority); built once per process and bundle (~50 ms).
    Kept by the process, not a run: it is keyed by the bundle it read, holds no secret and
    no connection, and is the same for every run."""
    with _ssl_lock:
        return _ssl_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


def warm_up() -> threading.Thread:
    """Prepare in a thread what a process's first client needs, while the caller reads its
    state from the lake (DuckDB and delta-rs work outside the GIL): httpx's transport
    modules, which httpx imports when the first client is made, and the CA bundle, which
    is parsed whole. Profiled in a fresh process's incremental run, the two took 60 ms
    of a 450 ms run on an idle machine and far more on a busy one. Safe to skip: the
    first client then does both itself."""

    def warm() -> None:
        import httpcore  # noqa: F401  (httpx's transport: what AsyncHTTPTransport imports)

        ssl_context()

    thread = threading.Thread(target=warm, name="http-warm-up", daemon=True)
    thread.start()
    return thread


def make_http(
    base_url: str,
    *,
    headers: Mapping[str, str],
    concurrency: int,
    timeout: float,
    transport: httpx.AsyncBaseTransport | None = None,
    credentials: Mapping[str, str] | None = None,
) -> httpx.AsyncClient:
    """The one shared client of a source: keep-alive pool sized to the largest window.

    ``credentials`` (headers such as ``Authorization``) go to the base URL's origin only
    (``OriginAuth``): a ``Link`` header or a redirect naming another host gets the request
    without them. Redirects are not followed by httpx but by ``RestClient``, which also
    takes the query credential off a hop to another origin. Proxies (``HTTPS_PROXY``,
    ``NO_PROXY`` ...) and the CA bundle (``SSL_CERT_FILE``) come from the environment, as
    GitHub Enterprise users need.
    """
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    if transport is None and concurrency > SHARD_CONNECTIONS:
        transport = ShardedTransport(concurrency, verify=ssl_context())
    return httpx.AsyncClient(
        base_url=base_url,
        auth=OriginAuth(credentials, base_url) if credentials else None,
        verify=ssl_context(),
        headers=dict(headers),
        timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
        limits=limits,
        transport=transport,
        follow_redirects=False,  # RestClient follows them, minding each hop's origin
        trust_env=True,  # HTTPS_PROXY, NO_PROXY, ...
    )


# Connections of one pool of ``ShardedTransport``: httpcore's pool looks at every one of
# its connections (idle? expired? readable socket?) each time a request starts or ends,
# so one pool of 100 connections costs O(100) per event, ~1.2 million checks (~0.85 s of
# CPU on the event loop, most of the client's) for one 480-item listing read as 96 pages
# at once (cProfile, ``benchmarks/github.md``). Pools of 8 cost an eighth of that.
SHARD_CONNECTIONS = 8


class ShardedTransport(httpx.AsyncBaseTransport):
    """httpx's own transport (``httpx.AsyncHTTPTransport``), split into pools of
    ``SHARD_CONNECTIONS`` connections; a request goes to the pool with the fewest requests
    open (the first of them on a tie, so a sequential listing keeps reusing one
    connection). The same connections, TLS and keep-alive as one pool of
    ``concurrency``; what changes is the client CPU each request costs when many are in
    flight. Proxies from the environment are httpx's own mounts, beside it."""

    def __init__(self, concurrency: int, *, verify: ssl.SSLContext) -> None:
        count = -(-concurrency // SHARD_CONNECTIONS)
        size = -(-concurrency // count)
        limits = httpx.Limits(max_connections=size, max_keepalive_connections=size)
        self.pools = [httpx.AsyncHTTPTransport(verify=verify, limits=limits) for _ in range(count)]
        self.open = [0] * count  # requests open per pool (sent, body not yet closed)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        i = min(range(len(self.pools)), key=self.open.__getitem__)
        self.open[i] += 1
        try:
            response = await self.pools[i].handle_async_request(request)
        except BaseException:
            self.open[i] -= 1
            raise
        assert isinstance(response.stream, httpx.AsyncByteStream)
        response.stream = _Counted(response.stream, self.open, i)
        return response

    async def __aenter__(self) -> ShardedTransport:
        for pool in self.pools:
            await pool.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for pool in self.pools:
            await pool.__aexit__(*exc)

    async def aclose(self) -> None:
        for pool in self.pools:
            await pool.aclose()


class _Counted(httpx.AsyncByteStream):
    """A response body that gives its pool's open-request count back when closed."""

    def __init__(self, inner: httpx.AsyncByteStream, counts: list[int], index: int) -> None:
        self.inner, self.counts, self.index, self.closed = inner, counts, index, False

    async def __aiter__(self) -> Any:
        async for chunk in self.inner:
            yield chunk

    async def aclose(self) -> None:
        if not self.closed:
            self.closed = True
            self.counts[self.index] -= 1
        await self.inner.aclose()


class OriginAuth(httpx.Auth):
    """Credential headers on requests to the base URL's origin (scheme, host, port) only."""

    def __init__(self, headers: Mapping[str, str], base_url: str) -> None:
        self._headers = dict(headers)
        self._origin = origin(httpx.URL(base_url))

    def values(self) -> list[str]:
        """The credentials' values (to keep them off a URL bound for another origin)."""
        return list(self._headers.values())

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if origin(request.url) == self._origin:
            request.headers.update(self._headers)
        else:
            for name in self._headers:
                request.headers.pop(name, None)
            log.warning(
                "%s is not on the API's host: sent without the credentials", safe_url(request.url)
            )
        yield request


def origin(url: httpx.URL) -> tuple[str, str, int | None]:
    default = {"http": 80, "https": 443}.get(url.scheme)
    return url.scheme, url.host.lower(), url.port or default


def safe_url(url: str | httpx.URL) -> str:
    """A URL fit for logs and tables: no userinfo, no secret query parameters."""
    return redact(str(url))
