"""A small nested-JSON shop API on loopback (real HTTP, a thread of this process) for the
typed-table tests and the side-by-side benchmark with dlt.

``GET /orders`` pages ``{"data": [...], "next_cursor": "..."}`` over the orders a test
sets (``ShopServer.orders``), ``limit`` records a page, ``since`` and ``until`` filtering
by ``updated_at``; ``GET /orders/{id}/notes`` two notes an order; ``POST /oauth/token``
(OAuth 2 client credentials) when ``token`` is set."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse


class ShopServer:
    def __init__(self, orders: list[dict[str, Any]] | None = None, latency: float = 0.0) -> None:
        self.orders: list[dict[str, Any]] = list(orders or [])
        self.latency = latency  # seconds each GET takes (a remote API's round trip)
        self.requests: list[str] = []
        # OAuth 2 client credentials: when token is set, /orders wants it as a bearer token,
        # and POST /oauth/token hands it out for these form fields
        self.token = ""
        self.client: dict[str, str] = {}
        self.gone: set[str] = set()  # orders whose notes answer 404
        shop = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(length).decode()).items()}
                shop.requests.append(f"POST {self.path}")
                wanted = {"grant_type": "client_credentials", **shop.client}
                if self.path != "/oauth/token" or any(form.get(k) != v for k, v in wanted.items()):
                    self.send_error(401)
                    return
                body = json.dumps({"access_token": shop.token, "expires_in": 3600}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if shop.latency:
                    time.sleep(shop.latency)
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                shop.requests.append(self.path)
                if shop.token and self.headers.get("Authorization") != f"Bearer {shop.token}":
                    self.send_error(401)
                    return
                parts = url.path.strip("/").split("/")
                if parts == ["orders"]:
                    since, until = query.get("since", ""), query.get("until")
                    listed = [
                        o
                        for o in shop.orders
                        if str(o.get("updated_at", "")) >= since
                        and (until is None or str(o.get("updated_at", "")) < until)
                    ]
                elif len(parts) == 3 and parts[1] in shop.gone:
                    self.send_error(404)
                    return
                elif len(parts) == 3 and parts[0] == "orders" and parts[2] == "notes":
                    listed = [{"id": i, "text": f"note {i} of {parts[1]}"} for i in (1, 2)]
                else:
                    self.send_error(404)
                    return
                offset = int(query.get("cursor") or 0)
                limit = int(query.get("limit") or 10)
                items = listed[offset : offset + limit]
                more = offset + limit < len(listed)
                body = json.dumps(
                    {"data": items, "next_cursor": str(offset + limit) if more else None}
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> ShopServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def order(n: int, **extra: Any) -> dict[str, Any]:
    """Order ``n``: a customer object, a list of lines, nullable fields, ISO timestamps."""
    record: dict[str, Any] = {
        "id": n,
        "createdAt": f"2025-03-{1 + n % 28:02d}T10:{n % 60:02d}:00+02:00",
        "ship_date": f"2025-04-{1 + n % 28:02d}",
        "total": n * 10 if n % 2 else n * 10 + 0.5,  # integers and fractions mixed
        "paid": n % 3 == 0,
        "note": None if n < 15 else f"note {n}",  # null on the first page
        "status": "open",
        "customer": {"id": 1000 + n, "name": f"Customer {n}", "address": {"city": "Lyon"}},
        "lines": [{"sku": f"S{n}-{i}", "qty": i + 1, "price": 2.5} for i in range(n % 3 + 1)],
        "tags": ["a", "b"][: n % 3],
    }
    record.update(extra)
    return record


class IssuesServer:
    """GitHub's issues listing, in its shape, for dlt's documented example: ``GET
    /repos/{owner}/{repo}/issues`` (the body a list, ``Link: <...>; rel="next"``, ``page``
    and ``per_page``, ``since`` by ``updated_at``) and ``GET
    /repos/{owner}/{repo}/issues/{number}/comments``."""

    def __init__(self, issues: int = 45) -> None:
        self.issues = [
            {
                "id": 9000 + n,
                "number": n,
                "title": f"Issue {n}",
                "state": "open",
                "user": {"login": f"user{n % 4}", "id": n % 4},
                "labels": [{"id": 1, "name": "bug"}] if n % 2 else [],
                "comments": 2,
                "created_at": f"2024-02-01T00:{n % 60:02d}:00Z",
                "updated_at": f"2024-03-01T00:{n % 60:02d}:00Z",
                "closed_at": None,
            }
            for n in range(1, issues + 1)
        ]
        self.requests: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                query = {k: v[0] for k, v in parse_qs(url.query).items()}
                server.requests.append(self.path)
                parts = url.path.strip("/").split("/")
                if len(parts) == 4 and parts[3] == "issues":
                    since = query.get("since", "")
                    listed = [i for i in server.issues if str(i["updated_at"]) >= since]
                elif len(parts) == 6 and parts[5] == "comments":
                    listed = [
                        {"id": int(parts[4]) * 10 + c, "body": f"comment {c}", "user": {"id": c}}
                        for c in (1, 2)
                    ]
                else:
                    self.send_error(404)
                    return
                page, per_page = int(query.get("page") or 1), int(query.get("per_page") or 30)
                items = listed[(page - 1) * per_page : page * per_page]
                body = json.dumps(items).encode()
                self.send_response(200)
                if page * per_page < len(listed):
                    nxt = {**query, "page": str(page + 1)}
                    link = f"{server.url.rstrip('/')}{url.path}?" + "&".join(
                        f"{k}={v}" for k, v in nxt.items()
                    )
                    self.send_header("Link", f'<{link}>; rel="next"')
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> IssuesServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
