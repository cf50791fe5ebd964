"""A GitHub-compatible REST server for the demo, the tests and the benchmarks.

It serves ``GET /repos/{owner}/{repo}/pulls`` (and the same listing at
``/repositories/{id}/pulls``, the form GitHub puts in ``Link`` headers),
``GET /orgs/{org}/repos`` and ``GET /rate_limit`` the way api.github.com does:

* ``Link`` headers in GitHub's exact format (``<url>; rel="prev", <url>;
  rel="next", <url>; rel="last", <url>; rel="first"``), ``per_page``
  defaulting to 30 and capped at 100, ``state``/``sort=updated``/``direction``;
* ``x-ratelimit-limit/-remaining/-used/-reset/-resource`` on every answer and
  a finite budget per identity (a token, or anonymous with 60/hour);
  403 with ``remaining: 0`` once it is spent; ``/rate_limit`` and 304
  answers are free;
* weak ``ETag`` on every page and 304 on a matching ``If-None-Match``;
* a secondary rate limit (403 with ``Retry-After``, or without it when
  configured so) when more than ``max_in_flight`` requests are in flight;
* latency of ``latency_base_ms + latency_per_item_ms x items`` per page;
* a start line (``start_together``): listing requests wait until that many
  repositories were asked for, so runs started apart overlap;
* injected faults: 502 answers or hangs for the first N requests whose
  path and query contain a string;
* 401 ``Bad credentials`` for a token other than the configured one, 404
  for unknown repositories.

Control endpoints for tests: ``GET /_dev/stats``, ``POST /_dev/reset``,
``POST /_dev/config`` (faults, latency, limits), ``POST /_dev/budget``
(remaining, limit, reset_in) and ``POST /_dev/touch`` (update or add pull
requests, which moves them to the top of the listing).

Run ``python -m dev.servers.github --repo octo/demo:480`` or use ``DevGitHub``
as a context manager (a child process on a free loopback port).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from dev.servers.child import ConfiguredServer, serve_uvicorn

T0 = datetime(2025, 1, 1, tzinfo=UTC)
ANONYMOUS = "anonymous"
AUTHENTICATED = "authenticated"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Config:
    """How the server behaves; every field can be changed at ``/_dev/config``."""

    repos: dict[str, int] = field(default_factory=lambda: {"octo/demo": 120})
    token: str | None = None  # when set, any other token answers 401
    limit: int = 5000  # authenticated requests per window
    anonymous_limit: int = 60
    window_seconds: float = 3600.0
    latency_base_ms: float = 0.0
    latency_per_item_ms: float = 0.0
    max_in_flight: int = 100  # beyond this, the secondary rate limit answers
    secondary_retry_after: float | None = 1.0  # None: no Retry-After header
    faults: list[dict[str, Any]] = field(default_factory=list)  # {kind: 502|hang, match, times}
    hang_seconds: float = 30.0
    link_base: str | None = None  # Link headers point at this host instead (another server)
    # hold listing requests until this many repositories have been asked for (at most
    # ``start_timeout`` s): runs started in separate processes then overlap for sure
    start_together: int = 0
    start_timeout: float = 60.0


@dataclass
class _Budget:
    limit: int
    remaining: int
    reset: float


class GitHubState:
    """Repositories, budgets and counters (one event loop: no locks needed)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.pulls: dict[str, list[dict[str, Any]]] = {}
        self.ids: dict[str, int] = {}
        self.clock = T0
        for i, (repo, n) in enumerate(sorted(config.repos.items())):
            self.ids[repo] = 1000 + i
            self.pulls[repo] = [self._make(repo, k) for k in range(1, n + 1)]
        self.budgets: dict[str, _Budget] = {}
        self.stats: Counter[str] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.fault_hits: Counter[int] = Counter()
        self.asked: set[str] = set()  # repositories whose listing was requested
        self.started = asyncio.Event()
        self._listings: dict[tuple[str, str, str, bool], list[dict[str, Any]]] = {}

    def _make(self, repo: str, number: int) -> dict[str, Any]:
        created = T0 + timedelta(hours=number)
        updated = created + timedelta(minutes=(number * 37) % 50)
        self.clock = max(self.clock, updated)
        closed = number % 3 == 0
        owner = repo.split("/")[0]
        return {
            "url": f"https://api.github.com/repos/{repo}/pulls/{number}",
            "id": self._id(repo) * 100_000 + number,
            "node_id": f"PR_{number:08d}",
            "html_url": f"https://github.com/{repo}/pull/{number}",
            "number": number,
            "state": "closed" if closed else "open",
            "locked": False,
            "title": f"Change {number} of {repo}",
            "user": {"login": f"dev{number % 17}", "id": number % 17 + 1, "type": "User"},
            "body": f"This pull request changes part {number} of {owner}'s project. " * 3,
            "labels": [{"id": number % 5, "name": f"area-{number % 5}"}] if number % 2 else [],
            # two people on every fourth pull request, in the order GitHub lists them
            "assignees": [
                {"login": f"dev{(number + k) % 17}", "id": (number + k) % 17 + 1, "type": "User"}
                for k in range(2)
            ]
            if number % 4 == 0
            else [],
            "requested_reviewers": [],
            "requested_teams": [],
            "created_at": _iso(created),
            "updated_at": _iso(updated),
            "closed_at": _iso(updated) if closed else None,
            "merged_at": _iso(updated) if closed and number % 2 else None,
            "draft": number % 11 == 0,
            "head": {
                "ref": f"feature-{number}",
                "sha": hashlib.sha1(f"{repo}{number}".encode()).hexdigest(),
            },
            "base": {"ref": "main", "sha": "0" * 40},
        }

    def _id(self, repo: str) -> int:
        return self.ids.get(repo) or 1000 + len(self.ids)

    def touch(
        self, repo: str, numbers: list[int], add: int = 0, fields: dict[str, Any] | None = None
    ) -> list[int]:
        """Update (or add) pull requests: each becomes the most recently updated, with
        ``fields`` set (a field the API starts to send, or a value of another type)."""
        self._listings.clear()
        pulls = self.pulls[repo]
        by_number = {p["number"]: p for p in pulls}
        for _ in range(add):
            n = max(by_number, default=0) + 1
            pr = self._make(repo, n)
            pulls.append(pr)
            by_number[n] = pr
            numbers = [*numbers, n]
        for n in numbers:
            self.clock += timedelta(minutes=1)
            by_number[n]["updated_at"] = _iso(self.clock)
            by_number[n]["title"] += " (updated)"
            by_number[n].update(fields or {})
        return numbers

    def listing(self, repo: str, wanted: str, key: str, descending: bool) -> list[dict[str, Any]]:
        """The filtered, sorted listing (cached until the next ``touch``)."""
        cache_key = (repo, wanted, key, descending)
        items = self._listings.get(cache_key)
        if items is None:
            items = [p for p in self.pulls[repo] if wanted == "all" or p["state"] == wanted]
            items.sort(key=lambda p: (p[key], p["number"]), reverse=descending)
            self._listings[cache_key] = items
        return items

    def budget(self, identity: str) -> _Budget:
        now = time.time()
        b = self.budgets.get(identity)
        if b is None or now >= b.reset:
            limit = self.config.anonymous_limit if identity == ANONYMOUS else self.config.limit
            b = self.budgets[identity] = _Budget(limit, limit, now + self.config.window_seconds)
        return b


def build_app(config: Config) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    state = GitHubState(config)

    def rate_headers(identity: str) -> dict[str, str]:
        b = state.budget(identity)
        return {
            "x-ratelimit-limit": str(b.limit),
            "x-ratelimit-remaining": str(b.remaining),
            "x-ratelimit-used": str(b.limit - b.remaining),
            "x-ratelimit-reset": str(int(b.reset)),
            "x-ratelimit-resource": "core",
        }

    def identify(request: Request) -> str | Response:
        auth = request.headers.get("authorization")
        if not auth:
            return ANONYMOUS
        state.stats["authorization"] += 1  # requests that carried a credential
        given = auth.split(None, 1)[-1]
        if config.token is not None and given != config.token:
            state.stats["401"] += 1
            return JSONResponse(
                {
                    "message": "Bad credentials",
                    "documentation_url": "https://docs.github.com/rest",
                    "status": "401",
                },
                status_code=401,
            )
        return AUTHENTICATED

    async def rate_limit(request: Request) -> Response:
        who = identify(request)
        if isinstance(who, Response):
            return who
        await asyncio.sleep(config.latency_base_ms / 1000)
        b = state.budget(who)
        core = {
            "limit": b.limit,
            "remaining": b.remaining,
            "reset": int(b.reset),
            "used": b.limit - b.remaining,
            "resource": "core",
        }
        return JSONResponse({"resources": {"core": core}, "rate": core}, headers=rate_headers(who))

    async def pulls_by_name(request: Request) -> Response:
        repo = f"{request.path_params['owner']}/{request.path_params['name']}"
        return await pulls(request, repo)

    async def pulls_by_id(request: Request) -> Response:
        rid = int(request.path_params["id"])
        repo = next((r for r, i in state.ids.items() if i == rid), "")
        return await pulls(request, repo)

    async def pulls(request: Request, repo: str) -> Response:
        if config.start_together and not state.started.is_set():
            state.asked.add(repo)
            if len(state.asked) >= config.start_together:
                state.started.set()
            else:
                state.stats["held_for_start"] += 1
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(state.started.wait(), config.start_timeout)
        state.in_flight += 1
        state.max_in_flight = max(state.max_in_flight, state.in_flight)
        state.stats["requests"] += 1
        try:
            return await _pulls(request, repo)
        finally:
            state.in_flight -= 1

    async def _pulls(request: Request, repo: str) -> Response:
        who = identify(request)
        if isinstance(who, Response):
            return who
        if state.in_flight > config.max_in_flight:
            state.stats["secondary"] += 1
            headers = rate_headers(who)
            if config.secondary_retry_after is not None:
                headers["retry-after"] = str(config.secondary_retry_after)
            return JSONResponse(
                {
                    "message": "You have exceeded a secondary rate limit. "
                    "Please wait a few minutes before you try again."
                },
                status_code=403,
                headers=headers,
            )
        target = request.url.path + "?" + request.url.query
        for i, fault in enumerate(config.faults):
            if fault["match"] in target and state.fault_hits[i] < int(fault.get("times", 1)):
                state.fault_hits[i] += 1
                state.stats[f"fault {fault['kind']}"] += 1
                if fault["kind"] == "hang":
                    await asyncio.sleep(config.hang_seconds)
                await asyncio.sleep(config.latency_base_ms / 1000)
                return JSONResponse({"message": "Server Error"}, status_code=502)
        b = state.budget(who)
        if b.remaining <= 0:
            state.stats["primary_limited"] += 1
            return JSONResponse(
                {
                    "message": "API rate limit exceeded. (But here's the good news: "
                    "Authenticated requests get a higher rate limit.)"
                },
                status_code=403,
                headers=rate_headers(who),
            )
        if repo not in state.pulls:
            b.remaining -= 1
            state.stats["counted"] += 1
            state.stats["404"] += 1
            await asyncio.sleep(config.latency_base_ms / 1000)
            return JSONResponse(
                {"message": "Not Found", "status": "404"},
                status_code=404,
                headers=rate_headers(who),
            )
        q = request.query_params
        try:
            per_page = min(100, max(1, int(q.get("per_page", 30))))
        except ValueError:
            per_page = 30
        try:
            page = max(1, int(q.get("page", 1)))
        except ValueError:
            page = 1
        wanted = q.get("state", "open")
        key = "updated_at" if q.get("sort") == "updated" else "created_at"
        descending = q.get("direction", "desc" if key == "updated_at" else "asc") == "desc"
        items = state.listing(repo, wanted, key, descending)
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        body = json.dumps(chunk, separators=(",", ":")).encode()
        link = link_header(
            config.link_base or str(request.base_url).rstrip("/"),
            state.ids[repo],
            q.multi_items(),
            page,
            last,
        )
        etag = 'W/"' + hashlib.sha256(body + link.encode()).hexdigest()[:40] + '"'
        headers = rate_headers(who)
        headers["etag"] = etag
        if etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
            state.stats["not_modified"] += 1
            await asyncio.sleep(config.latency_base_ms / 1000)
            return Response(status_code=304, headers=headers)
        b.remaining -= 1
        state.stats["counted"] += 1
        state.stats["200"] += 1
        headers = rate_headers(who)
        headers["etag"] = etag
        if link:
            headers["link"] = link
        await asyncio.sleep(
            (config.latency_base_ms + config.latency_per_item_ms * len(chunk)) / 1000
        )
        return Response(
            body, status_code=200, headers=headers, media_type="application/json; charset=utf-8"
        )

    async def org_repos(request: Request) -> Response:
        """``GET /orgs/{org}/repos``: the repositories of an owner, paged like every listing."""
        who = identify(request)
        if isinstance(who, Response):
            return who
        state.stats["requests"] += 1
        org = request.path_params["org"]
        b = state.budget(who)
        if b.remaining <= 0:
            state.stats["primary_limited"] += 1
            return JSONResponse(
                {"message": "API rate limit exceeded"}, status_code=403, headers=rate_headers(who)
            )
        b.remaining -= 1
        state.stats["counted"] += 1
        names = sorted(r for r in state.pulls if r.split("/")[0] == org)
        items = [
            {
                "id": state.ids[r],
                "name": r.split("/")[1],
                "full_name": r,
                "owner": {"login": org},
                "updated_at": max((p["updated_at"] for p in state.pulls[r]), default=_iso(T0)),
            }
            for r in names
        ]
        q = request.query_params
        per_page = min(100, max(1, int(q.get("per_page", 30) or 30)))
        page = max(1, int(q.get("page", 1) or 1))
        last = max(1, -(-len(items) // per_page))
        headers = rate_headers(who)
        base = str(request.base_url).rstrip("/")
        kept = [(k, v) for k, v in q.multi_items() if k != "page"]
        if page < last:
            nxt = f"{base}/orgs/{org}/repos?{urlencode([*kept, ('page', str(page + 1))])}"
            end = f"{base}/orgs/{org}/repos?{urlencode([*kept, ('page', str(last))])}"
            headers["link"] = f'<{nxt}>; rel="next", <{end}>; rel="last"'
        await asyncio.sleep(config.latency_base_ms / 1000)
        return JSONResponse(items[(page - 1) * per_page : page * per_page], headers=headers)

    async def stats(request: Request) -> Response:
        return JSONResponse(
            {
                **state.stats,
                "max_in_flight": state.max_in_flight,
                "remaining": {k: b.remaining for k, b in state.budgets.items()},
            }
        )

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
        return JSONResponse(asdict(config) | {"token": None})

    async def set_budget(request: Request) -> Response:
        spec = await request.json()
        for who in (ANONYMOUS, AUTHENTICATED):
            b = state.budget(who)
            b.limit = int(spec.get("limit", b.limit))
            b.remaining = int(spec.get("remaining", b.limit))
            if "reset_in" in spec:
                b.reset = time.time() + float(spec["reset_in"])
        return JSONResponse({k: asdict(b) for k, b in state.budgets.items()})

    async def touch(request: Request) -> Response:
        spec = await request.json()
        numbers = state.touch(
            spec["repo"],
            list(spec.get("numbers", [])),
            int(spec.get("add", 0)),
            dict(spec.get("fields") or {}),
        )
        return JSONResponse({"numbers": numbers})

    return Starlette(
        routes=[
            Route("/rate_limit", rate_limit),
            Route("/repos/{owner}/{name}/pulls", pulls_by_name),
            Route("/repositories/{id:int}/pulls", pulls_by_id),
            Route("/orgs/{org}/repos", org_repos),
            Route("/_dev/stats", stats),
            Route("/_dev/reset", reset, methods=["POST"]),
            Route("/_dev/config", configure, methods=["POST"]),
            Route("/_dev/budget", set_budget, methods=["POST"]),
            Route("/_dev/touch", touch, methods=["POST"]),
        ]
    )


def link_header(
    base: str, repo_id: int, params: list[tuple[str, str]], page: int, last: int
) -> str:
    """GitHub's ``Link``: prev, next, last, first (those that apply), on ``/repositories/{id}``."""
    kept = [(k, v) for k, v in params if k != "page"]

    def url(n: int) -> str:
        return f"<{base}/repositories/{repo_id}/pulls?{urlencode([*kept, ('page', str(n))])}>"

    parts = []
    if page > 1:
        parts.append(f'{url(min(page - 1, last))}; rel="prev"')
    if page < last:
        parts += [f'{url(page + 1)}; rel="next"', f'{url(last)}; rel="last"']
    if page > 1:
        parts.append(f'{url(1)}; rel="first"')
    return ", ".join(parts)


def serve(config: Config, host: str, port: int) -> None:
    serve_uvicorn(build_app(config), host, port)


# ---------------------------------------------------------------------------- client side


class DevGitHub(ConfiguredServer):
    """Start the server in a child process; ``with DevGitHub(repos={...}) as gh: gh.url``."""

    label = "GitHub dev server"

    module = "dev.servers.github"
    config_type = Config

    def set_budget(self, **spec: Any) -> None:
        """``remaining``, ``limit``, ``reset_in`` (seconds) for every identity."""
        self.post("/_dev/budget", spec)

    def touch(
        self,
        repo: str,
        numbers: list[int] | None = None,
        add: int = 0,
        fields: dict[str, Any] | None = None,
    ) -> list[int]:
        body = {"repo": repo, "numbers": numbers or [], "add": add, "fields": fields or {}}
        return list(self.post("/_dev/touch", body)["numbers"])


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--config", default="{}", help="Config fields as JSON.")
    p.add_argument("--repo", action="append", default=[], help="OWNER/NAME:COUNT (repeatable).")
    a = p.parse_args(argv)
    config = Config(**json.loads(a.config))
    if a.repo:
        config.repos = {r.rsplit(":", 1)[0]: int(r.rsplit(":", 1)[1]) for r in a.repo}
    serve(config, a.host, a.port)


if __name__ == "__main__":
    main()
