"""A stand-in API with the response shapes dlt's ``rest_api`` files are written for, one
route per shape, for the tests of dlt's forms (``tests/ingest/rest/test_dlt_forms.py``).

Every listing holds ``records`` records (``{"id": 1, "name": "item-1"}`` ...) unless
told; the pokeapi routes hold ``pokeapi`` records each. Pages are capped at
``max_page_size`` records whatever size is asked for (an API that caps its pages).

* ``GET /pokemon``, ``/berry``, ``/location``: PokeAPI's shape, ``{"count", "next",
  "previous", "results"}``, ``limit`` (20 unless asked) and ``offset``; ``next`` is an
  absolute URL, null on the last page;
* ``GET /numbered``: ``{"data": [...], "total": PAGES}`` (the key is ``total_key``),
  ``page`` counted from ``base_page`` (0 unless told) and ``per_page``; ``totals: false``
  leaves out the total;
* ``GET /offsets``: ``{"data": [...], "total": RECORDS}``, ``offset`` and ``limit``;
* ``GET /cursored``: ``{"items": [...], "cursors": {"next": "..."}}``, ``cursor`` and
  ``limit`` (the shape of dlt's default ``cursor_path``, ``cursors.next``);
* ``GET /header_cursored``: the body is the list, the next cursor in a ``next`` header
  (dlt's default ``cursor_key``);
* ``GET /linked``: the body is the list, ``Link: <...>; rel="next"``, ``page`` from 1
  and ``per_page``; ``linked_pages: N`` answers 503 for every page after the Nth (a
  server that stops answering pages);
* ``GET /record``: one object (no list in it); ``GET /things/{id}``: one object, 404 for
  an id beyond ``records`` or divisible by ``missing_every``.

``GET /_dev/stats``: the requests answered, each request's path and query, in order, and
its ``Authorization`` scheme (``Bearer``; never the credential);
``GET /_dev/totals``: how many records each listing holds, counted by the server.

Run ``python -m dev.servers.shapes`` or use ``DevShapes`` as a context manager.
"""

from __future__ import annotations

import argparse
import base64
import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from dev.servers.child import ConfiguredServer, serve_uvicorn

POKEAPI = ("pokemon", "berry", "location")


@dataclass
class Config:
    """How the server behaves; every field can be changed at ``/_dev/config``."""

    records: int = 100
    pokeapi: dict[str, int] = field(
        default_factory=lambda: {"pokemon": 1302, "berry": 64, "location": 1089}
    )
    max_page_size: int = 25
    default_page_size: int = 20
    base_page: int = 0
    totals: bool = True
    total_key: str = "total"  # /numbered's key of its total of pages
    linked_pages: int | None = None  # /linked answers 503 for pages after this one
    missing_every: int | None = None  # /things/{id} answers 404 for every id divisible by it


def _encode(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def _decode(cursor: str | None) -> int:
    if not cursor:
        return 0
    return int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()[2:])


def build_app(config: Config) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    seen: list[str] = []
    schemes: list[str] = []  # each request's Authorization scheme (never its credential)

    def records(n: int) -> list[dict[str, Any]]:
        return [{"id": i, "name": f"item-{i}"} for i in range(1, n + 1)]

    def size(request: Request, *names: str) -> int:
        for name in names:
            value = request.query_params.get(name)
            if value is not None and value.isdigit():
                return max(1, min(int(value), config.max_page_size))
        return min(config.default_page_size, config.max_page_size)

    def number(request: Request, name: str, default: int) -> int:
        value = request.query_params.get(name)
        return int(value) if value is not None and value.lstrip("-").isdigit() else default

    def log(request: Request) -> None:
        query = request.url.query
        seen.append(request.url.path + (f"?{query}" if query else ""))
        schemes.append(request.headers.get("authorization", "").partition(" ")[0])

    def base(request: Request) -> str:
        return str(request.base_url).rstrip("/") + request.url.path

    async def pokeapi(request: Request) -> Response:
        log(request)
        name = request.url.path.strip("/")
        items = [
            {"name": f"{name}-{i}", "url": f"{base(request)}/{i}/"}
            for i in range(1, config.pokeapi[name] + 1)
        ]
        limit, offset = size(request, "limit"), max(0, number(request, "offset", 0))
        chunk = items[offset : offset + limit]
        after = offset + len(chunk)
        nxt = f"{base(request)}?{urlencode({'offset': after, 'limit': limit})}"
        prev = f"{base(request)}?{urlencode({'offset': max(0, offset - limit), 'limit': limit})}"
        body = {
            "count": len(items),
            "next": nxt if after < len(items) else None,
            "previous": prev if offset > 0 else None,
            "results": chunk,
        }
        return JSONResponse(body)

    async def numbered(request: Request) -> Response:
        log(request)
        items, per = records(config.records), size(request, "per_page", "page_size")
        page = number(request, "page", config.base_page) - config.base_page
        chunk = items[page * per : (page + 1) * per] if page >= 0 else []
        body: dict[str, Any] = {"data": chunk}
        if config.totals:
            body[config.total_key] = -(-len(items) // per)
        return JSONResponse(body)

    async def offsets(request: Request) -> Response:
        log(request)
        items, limit = records(config.records), size(request, "limit")
        offset = max(0, number(request, "offset", 0))
        body: dict[str, Any] = {"data": items[offset : offset + limit]}
        if config.totals:
            body["total"] = len(items)
        return JSONResponse(body)

    async def cursored(request: Request) -> Response:
        log(request)
        items, limit = records(config.records), size(request, "limit")
        start = _decode(request.query_params.get("cursor"))
        chunk = items[start : start + limit]
        after = start + len(chunk)
        nxt = _encode(after) if after < len(items) else None
        return JSONResponse({"items": chunk, "cursors": {"next": nxt}})

    async def header_cursored(request: Request) -> Response:
        log(request)
        items, limit = records(config.records), size(request, "limit")
        start = _decode(request.query_params.get("cursor"))
        chunk = items[start : start + limit]
        after = start + len(chunk)
        headers = {"next": _encode(after)} if after < len(items) else {}
        return JSONResponse(chunk, headers=headers)

    async def linked(request: Request) -> Response:
        log(request)
        items, per = records(config.records), size(request, "per_page")
        page = max(1, number(request, "page", 1))
        if config.linked_pages is not None and page > config.linked_pages:
            return JSONResponse({"error": "unavailable"}, status_code=503)
        chunk = items[(page - 1) * per : page * per]
        headers = {}
        if page * per < len(items):
            nxt = f"{base(request)}?{urlencode({'page': page + 1, 'per_page': per})}"
            headers["link"] = f'<{nxt}>; rel="next"'
        return JSONResponse(chunk, headers=headers)

    async def record(request: Request) -> Response:
        log(request)
        return JSONResponse({"id": 7, "name": "the only one", "version": "1.2"})

    async def thing(request: Request) -> Response:
        log(request)
        i = int(request.path_params["tid"])
        gone = config.missing_every is not None and i % config.missing_every == 0
        if not 1 <= i <= config.records or gone:
            return JSONResponse({"error": "not found"}, status_code=404)
        return JSONResponse({"id": i, "name": f"item-{i}", "size": i * 10})

    async def stats(request: Request) -> Response:
        return JSONResponse({"requests": len(seen), "seen": seen, "schemes": schemes})

    async def totals(request: Request) -> Response:
        return JSONResponse(
            {
                **config.pokeapi,
                **dict.fromkeys(
                    ("numbered", "offsets", "cursored", "header_cursored", "linked"),
                    config.records,
                ),
                "things": config.records
                - (config.records // config.missing_every if config.missing_every else 0),
                "record": 1,
            }
        )

    async def reset(request: Request) -> Response:
        seen.clear()
        schemes.clear()
        return JSONResponse({})

    async def configure(request: Request) -> Response:
        for k, v in (await request.json()).items():
            setattr(config, k, v)
        return JSONResponse({})

    return Starlette(
        routes=[
            *(Route(f"/{name}", pokeapi) for name in POKEAPI),
            Route("/numbered", numbered),
            Route("/offsets", offsets),
            Route("/cursored", cursored),
            Route("/header_cursored", header_cursored),
            Route("/linked", linked),
            Route("/record", record),
            Route("/things/{tid:int}", thing),
            Route("/_dev/stats", stats),
            Route("/_dev/totals", totals),
            Route("/_dev/reset", reset, methods=["POST"]),
            Route("/_dev/config", configure, methods=["POST"]),
        ]
    )


class DevShapes(ConfiguredServer):
    """``with DevShapes(max_page_size=25) as api: api.url``."""

    label = "dlt shapes server"
    module = "dev.servers.shapes"
    config_type = Config

    def totals(self) -> dict[str, int]:
        import urllib.request

        with urllib.request.urlopen(f"{self.url}/_dev/totals", timeout=10) as r:
            return dict(json.loads(r.read()))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--port", type=int, default=8767)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--config", default="{}", help="Config fields as JSON.")
    a = p.parse_args(argv)
    serve_uvicorn(build_app(Config(**json.loads(a.config))), a.host, a.port)


if __name__ == "__main__":
    main()
