"""The GitHub client's HTTP boundary against real loopback servers: the token goes to
the API's origin only, proxies and a private certificate authority come from the
standard environment variables (GitHub Enterprise users need both)."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from ingest.rest.config import RestConfig
from ingest.rest.github import GITHUB, github_source
from ingest.rest.run import make_client
from ingest.settings import Settings
from tests.scripted_server import tls_server_context

TOKEN = "ghp_" + "HttpTestToken0123456789abcdefABCDEF"  # fake, built so no scanner flags it


class Recorder(BaseHTTPRequestHandler):
    """Answers every GET with ``[]`` and remembers the request line and headers."""

    seen: list[tuple[str, str, dict[str, str]]]

    def do_GET(self) -> None:
        self.server.seen.append((self.requestline, self.path, dict(self.headers)))  # type: ignore[attr-defined]
        body = json.dumps([]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class Server:
    def __init__(self, host: str, context: ssl.SSLContext | None = None) -> None:
        self.httpd = ThreadingHTTPServer((host, 0), Recorder)
        self.httpd.seen = []  # type: ignore[attr-defined]
        if context is not None:
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        scheme = "https" if context else "http"
        self.url = f"{scheme}://{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def seen(self) -> list[tuple[str, str, dict[str, str]]]:
        return self.httpd.seen  # type: ignore[attr-defined,no-any-return]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[list[Server]]:
    started: list[Server] = []
    yield started
    for s in started:
        s.close()


async def get_all(base_url: str, urls: list[str], **settings_kw: object) -> list[int]:
    settings = Settings(**settings_kw)
    source = github_source(settings.github, ["octo/hello"], base_url=base_url, concurrency=2)
    gh = make_client(
        RestConfig.of(settings),
        source,
        run_id="t",
        base_url=source.client.base_url,
        load_block=None,
        remembered=None,
        token=TOKEN,
        dialect=GITHUB,
    )
    async with gh.http:
        return [(await gh.get(u)).status for u in urls]


def test_token_goes_to_the_api_host_only(servers: list[Server]) -> None:
    """A Link header naming another host (here another loopback address) is refused unless
    INGEST_ALLOWED_HOSTS lists it; then it is fetched without the Authorization header;
    the API host still gets it."""
    from ingest.rest.errors import HopRefusedError

    api, other = Server("127.0.0.1"), Server("127.0.0.2")
    servers += [api, other]
    urls = ["/repos/o/r/pulls?page=1", f"{other.url}/repos/o/r/pulls?page=2"]
    with pytest.raises(HopRefusedError, match=r"127\.0\.0\.2"):
        asyncio.run(get_all(api.url, urls))
    assert other.seen == []
    api.seen.clear()
    statuses = asyncio.run(get_all(api.url, urls, allowed_hosts=[other.url]))
    assert statuses == [200, 200]
    [(_, _, api_headers)] = api.seen
    [(_, path, other_headers)] = other.seen
    assert api_headers.get("Authorization") == f"Bearer {TOKEN}"
    assert path == "/repos/o/r/pulls?page=2"
    assert "Authorization" not in other_headers
    assert TOKEN not in json.dumps(other_headers)


def test_https_proxy_from_the_environment(
    servers: list[Server], monkeypatch: pytest.MonkeyPatch
) -> None:
    """HTTP_PROXY (HTTPS_PROXY for https) routes the requests through the proxy: the
    proxy sees the absolute URL of a host this machine cannot even resolve."""
    proxy = Server("127.0.0.1")
    servers.append(proxy)
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "")
    statuses = asyncio.run(get_all("http://ghe.example.invalid/api/v3", ["/repos/o/r/pulls"]))
    assert statuses == [200]
    [(line, _, headers)] = proxy.seen
    assert line.startswith("GET http://ghe.example.invalid/api/v3/repos/o/r/pulls ")
    assert headers.get("Authorization") == f"Bearer {TOKEN}"


def test_ssl_cert_file_from_the_environment(
    servers: list[Server], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An API host with a certificate of a private CA: refused at once (no retries) with
    what to do, accepted once SSL_CERT_FILE names the CA's bundle."""
    from ingest.errors import EndpointError

    ca_file, context = tls_server_context(tmp_path)
    api = Server("127.0.0.1", context)
    servers.append(api)
    with pytest.raises(EndpointError, match=r"CERTIFICATE_VERIFY_FAILED.*set SSL_CERT_FILE"):
        asyncio.run(get_all(api.url, ["/rate_limit"]))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))
    assert asyncio.run(get_all(api.url, ["/rate_limit"])) == [200]
    [(_, path, headers)] = api.seen
    assert path == "/rate_limit" and headers.get("Authorization") == f"Bearer {TOKEN}"
