"""A small generic REST API for the demo, the tests and the benchmarks: projects and
their tickets, paged in any of the common styles, with limits nobody announces.

Endpoints: ``GET /projects``, ``GET /projects/{id}/tickets`` (a child listing; ``since``
filters by ``updated_at``, ``order=desc`` sorts newest first) and ``GET /tickets``
(every ticket). The paging style is one setting (``paginator``):

* ``header_link``    body is the list; ``Link`` with ``next`` (and ``last`` with totals);
                     ``page`` and ``per_page``
* ``page_number``    ``{"data": [...], "total_pages": N}``; ``page`` and ``per_page``
* ``offset``         ``{"data": [...], "total": N}``; ``offset`` and ``limit``
* ``cursor``         ``{"data": [...], "next_cursor": "..."}``; ``cursor`` and ``limit``
* ``header_cursor``  body is the list; ``X-Next-Cursor``; ``cursor`` and ``limit``
* ``json_link``      ``{"data": [...], "next": "http://..."}``

``totals: false`` leaves out every total (``last``, ``total_pages``, ``total``).

Limits: an API key (``X-API-Key`` header or ``api_key`` query) when ``api_key`` is
set, else 401; a hidden in-flight ceiling (``max_in_flight``: beyond it, 429 with
``Retry-After``, nothing announced beforehand); a request quota per window
(``quota`` per ``quota_window`` seconds, announced in ``x-ratelimit-*`` headers,
429 once spent); latency ``latency_ms + latency_per_item_ms x items``.

Faults for tests, each for the first ``times`` requests whose path and query
contain ``match``: ``bad_json`` (a truncated body), ``missing_records`` (the
records under another key), ``missing_key`` (records without ``id``),
``repeat_cursor`` (the next cursor or link points at the same page), ``500``;
hostile ones: ``redirect`` (302 to ``to`` + the path and query, the API key
kept in the query as a careless server would), ``huge_body`` (``size`` bytes
of a JSON list, streamed), ``deep_json`` (a list nested ``depth`` deep),
``huge_total`` (``rel="last"``, ``total_pages`` and ``total`` announce
``pages`` pages).

Control endpoints: ``GET /_dev/stats``, ``POST /_dev/reset``, ``POST /_dev/config``,
``POST /_dev/touch`` (update or add tickets of a project; a project not there yet is
added).

Run ``python -m dev.servers.rest`` or use ``DevRest`` as a context manager.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from dev.servers.child import ConfiguredServer, serve_uvicorn

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Config:
    """How the server behaves; every field can be changed at ``/_dev/config``."""

    projects: int = 3
    tickets_per_project: int = 50
    paginator: str = "cursor"
    totals: bool = True
    default_page_size: int = 20
    max_page_size: int = 100
    api_key: str | None = None
    max_in_flight: int | None = None  # the hidden ceiling
    limit_retry_after: float = 1.0
    quota: int | None = None  # requests per quota_window
    quota_window: float = 60.0
    latency_ms: float = 0.0
    latency_per_item_ms: float = 0.0
    faults: list[dict[str, Any]] = field(default_factory=list)


class RestState:
    def __init__(self, config: Config) -> None:
        self.config = config
        self.clock = T0
        self.projects: list[dict[str, Any]] = [
            {"id": p, "name": f"Project {p}", "updated_at": _iso(T0 + timedelta(days=p))}
            for p in range(1, config.projects + 1)
        ]
        self.tickets: dict[int, list[dict[str, Any]]] = {}
        for p in self.projects:
            pid = int(p["id"])
            self.tickets[pid] = [
                self._ticket(pid, n) for n in range(1, config.tickets_per_project + 1)
            ]
        self.stats: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.fault_hits: Counter[int] = Counter()
        self.quota_used = 0
        self.quota_reset = time.time() + config.quota_window

    def _ticket(self, pid: int, n: int) -> dict[str, Any]:
        updated = T0 + timedelta(hours=n, minutes=pid)
        self.clock = max(self.clock, updated)
        return {
            "id": pid * 100_000 + n,
            "project_id": pid,
            "number": n,
            "title": f"Ticket {n} of project {pid}",
            "status": ("open", "closed", "waiting")[n % 3],
            "updated_at": _iso(updated),
        }

    def touch(self, pid: int, numbers: list[int], add: int) -> list[int]:
        if pid not in self.tickets:  # a new project, its tickets added below
            self.projects.append(
                {"id": pid, "name": f"Project {pid}", "updated_at": _iso(self.clock)}
            )
            self.tickets[pid] = []
        tickets = self.tickets[pid]
        by_number = {t["number"]: t for t in tickets}
        for _ in range(add):
            n = max(by_number, default=0) + 1
            by_number[n] = self._ticket(pid, n)
            tickets.append(by_number[n])
            numbers = [*numbers, n]
        for n in numbers:
            self.clock += timedelta(minutes=1)
            by_number[n]["updated_at"] = _iso(self.clock)
            by_number[n]["title"] += " (updated)"
        return numbers

    def quota_headers(self) -> dict[str, str]:
        if self.config.quota is None:
            return {}
        now = time.time()
        if now >= self.quota_reset:
            self.quota_used = 0
            self.quota_reset = now + self.config.quota_window
        return {
            "x-ratelimit-limit": str(self.config.quota),
            "x-ratelimit-remaining": str(max(0, self.config.quota - self.quota_used)),
            "x-ratelimit-reset": str(int(self.quota_reset) + 1),
        }


def _encode(offset: int) -> str:
    return base64.urlsafe_b64encode(f"o:{offset}".encode()).decode().rstrip("=")


def _decode(cursor: str | None) -> int:
    if not cursor:
        return 0
    raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    return int(raw.split(":", 1)[1])


def build_app(config: Config) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    state = RestState(config)

    def _int(value: str | None, default: int) -> int:
        try:
            return int(value) if value is not None else default
        except ValueError:
            return default

    def fault(target: str) -> dict[str, Any]:
        for i, f in enumerate(config.faults):
            if f["match"] in target and state.fault_hits[i] < int(f.get("times", 1)):
                state.fault_hits[i] += 1
                state.stats[f"fault {f['kind']}"] += 1
                return f
        return {}

    def hostile(f: dict[str, Any], request: Request) -> Response | None:
        kind = f.get("kind")
        if kind == "redirect":
            location = str(f["to"]).rstrip("/") + request.url.path + "?" + request.url.query
            return Response(status_code=302, headers={"location": location})
        if kind == "huge_body":
            size = int(f["size"])
            item = b'{"id":0,"pad":"' + b"x" * 1000 + b'"},'

            async def chunks() -> Any:
                yield b"["
                for _ in range(size // len(item)):
                    yield item
                yield b'{"id":1}]'

            return StreamingResponse(chunks(), media_type="application/json")
        if kind == "deep_json":
            depth = int(f["depth"])
            return Response(b"[" * depth + b"]" * depth, media_type="application/json")
        return None

    async def page(request: Request, items: list[dict[str, Any]]) -> Response:
        q = request.query_params
        kind = config.paginator
        size = min(
            config.max_page_size,
            max(1, _int(q.get("per_page") or q.get("limit"), config.default_page_size)),
        )
        if kind in ("header_link", "page_number"):
            number = max(1, _int(q.get("page"), 1))
            start = (number - 1) * size
        elif kind == "offset":
            start = max(0, _int(q.get("offset"), 0))
        else:
            try:
                start = _decode(q.get("cursor"))
            except (ValueError, IndexError):
                return JSONResponse({"error": "bad cursor"}, status_code=400)
        chunk = items[start : start + size]
        end = start + len(chunk)
        more = end < len(items)
        target = request.url.path + "?" + request.url.query
        found = fault(target)
        broken = found.get("kind")
        answer = hostile(found, request)
        if answer is not None:
            return answer
        if broken == "huge_total":
            more, last = True, int(found["pages"])
        if broken == "500":
            return JSONResponse({"error": "internal"}, status_code=500)
        if broken == "missing_key":
            chunk = [{k: v for k, v in t.items() if k != "id"} for t in chunk]
        next_start = start if broken == "repeat_cursor" else end
        base = str(request.base_url).rstrip("/") + request.url.path
        kept = [(k, v) for k, v in q.multi_items() if k not in ("page", "offset", "cursor")]
        headers: dict[str, str] = {}
        body: Any
        if broken != "huge_total":
            last = max(1, -(-len(items) // size))
        if kind == "header_link":
            number = start // size + 1
            links = []
            if more or broken == "repeat_cursor":
                nxt = number if broken == "repeat_cursor" else number + 1
                links.append(f'<{base}?{urlencode([*kept, ("page", nxt)])}>; rel="next"')
                if config.totals:
                    links.append(f'<{base}?{urlencode([*kept, ("page", last)])}>; rel="last"')
            if links:
                headers["link"] = ", ".join(links)
            body = chunk
        elif kind == "page_number":
            body = {"data": chunk, "page": start // size + 1}
            if config.totals:
                body["total_pages"] = last
        elif kind == "offset":
            body = {"data": chunk, "offset": start}
            if config.totals:
                body["total"] = last * size if broken == "huge_total" else len(items)
        elif kind == "cursor":
            body = {"data": chunk, "next_cursor": _encode(next_start) if more else None}
        elif kind == "header_cursor":
            body = chunk
            if more:
                headers["x-next-cursor"] = _encode(next_start)
        else:  # json_link
            link = f"{base}?{urlencode([*kept, ('cursor', _encode(next_start))])}"
            body = {"data": chunk, "next": link if more else None}
        if broken == "missing_records" and isinstance(body, dict):
            body = {"results": body.pop("data"), **body}
        elif broken == "missing_records":
            body = {"results": body}
        await asyncio.sleep((config.latency_ms + config.latency_per_item_ms * len(chunk)) / 1000)
        raw = json.dumps(body, separators=(",", ":")).encode()
        if broken == "bad_json":
            raw = raw[: max(1, len(raw) // 2)]
        state.stats["200"] += 1
        return Response(raw, headers=headers, media_type="application/json")

    async def guarded(request: Request, items: Any) -> Response:
        state.stats["requests"] += 1
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        try:
            if config.api_key is not None:
                given = request.headers.get("x-api-key") or request.query_params.get("api_key")
                if given != config.api_key:
                    state.stats["401"] += 1
                    return JSONResponse({"error": "invalid API key"}, status_code=401)
            if config.max_in_flight is not None and state.in_flight > config.max_in_flight:
                state.stats["limited"] += 1
                return JSONResponse(
                    {"error": "too many concurrent requests"},
                    status_code=429,
                    headers={"retry-after": str(config.limit_retry_after)},
                )
            quota = state.quota_headers()
            if config.quota is not None:
                if state.quota_used >= config.quota:
                    state.stats["quota_limited"] += 1
                    return JSONResponse({"error": "quota exceeded"}, status_code=429, headers=quota)
                state.quota_used += 1
                quota = state.quota_headers()
            listing = items() if callable(items) else items
            if listing is None:
                state.stats["404"] += 1
                return JSONResponse({"error": "not found"}, status_code=404, headers=quota)
            response = await page(request, listing)
            response.headers.update(quota)
            return response
        finally:
            state.in_flight -= 1

    def tickets_of(pid: int, request: Request) -> list[dict[str, Any]] | None:
        tickets = state.tickets.get(pid)
        if tickets is None:
            return None
        since = request.query_params.get("since")
        chosen = [t for t in tickets if not since or t["updated_at"] >= since]
        if request.query_params.get("order") == "desc":
            return sorted(chosen, key=lambda t: (t["updated_at"], t["id"]), reverse=True)
        return sorted(chosen, key=lambda t: t["id"])

    async def projects(request: Request) -> Response:
        return await guarded(request, state.projects)

    async def project_tickets(request: Request) -> Response:
        pid = int(request.path_params["pid"])
        return await guarded(request, lambda: tickets_of(pid, request))

    async def all_tickets(request: Request) -> Response:
        def every() -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for pid in sorted(state.tickets):
                out += tickets_of(pid, request) or []
            return out

        return await guarded(request, every)

    async def stats(request: Request) -> Response:
        return JSONResponse({**state.stats, "max_in_flight": state.max_in_flight})

    async def reset(request: Request) -> Response:
        state.stats.clear()
        state.max_in_flight = 0
        return JSONResponse({})

    async def configure(request: Request) -> Response:
        changes = await request.json()
        for k, v in changes.items():
            setattr(config, k, v)
        if "faults" in changes:
            state.fault_hits.clear()
        if "quota" in changes or "quota_window" in changes:
            state.quota_used = 0
            state.quota_reset = time.time() + config.quota_window
        return JSONResponse(asdict(config) | {"api_key": None})

    async def touch(request: Request) -> Response:
        spec = await request.json()
        numbers = state.touch(
            int(spec["project"]), list(spec.get("numbers", [])), int(spec.get("add", 0))
        )
        return JSONResponse({"numbers": numbers})

    return Starlette(
        routes=[
            Route("/projects", projects),
            Route("/projects/{pid:int}/tickets", project_tickets),
            Route("/tickets", all_tickets),
            Route("/_dev/stats", stats),
            Route("/_dev/reset", reset, methods=["POST"]),
            Route("/_dev/config", configure, methods=["POST"]),
            Route("/_dev/touch", touch, methods=["POST"]),
        ]
    )


def serve(config: Config, host: str, port: int) -> None:
    serve_uvicorn(build_app(config), host, port)


class DevRest(ConfiguredServer):
    """Start the server in a child process; ``with DevRest(paginator="offset") as api: api.url``."""

    label = "REST dev server"

    module = "dev.servers.rest"
    config_type = Config

    def touch(self, project: int, numbers: list[int] | None = None, add: int = 0) -> list[int]:
        body = {"project": project, "numbers": numbers or [], "add": add}
        return list(self.post("/_dev/touch", body)["numbers"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--port", type=int, default=8766)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--config", default="{}", help="Config fields as JSON.")
    a = p.parse_args(argv)
    serve(Config(**json.loads(a.config)), a.host, a.port)


if __name__ == "__main__":
    main()
