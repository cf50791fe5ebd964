"""The GitHub dialect of the REST engine: what is GitHub's own, switched on by a source
file's ``client.dialect: github`` (``sources/github.yaml``; ``ingest github --repo``
builds the same source from its options, ``github_source``). ``ingest.rest.run``
gives it the source's client (window, governor, retries, shared limits) and stores
what the host allowed; its ``SourceRun`` pages each repository as one listing, calling
the hooks of ``GitHubDialect`` where GitHub differs (see ``ingest.rest.run``).

What the dialect adds to the declared source's client and paging loop
(``ingest.rest.engine.walk``):

* GitHub's headers (``Accept``, ``X-GitHub-Api-Version``) and an optional token
  (unauthenticated: 60 requests an hour);
* stored page ETags sent back as ``If-None-Match`` (a 304 is free of the budget);
* the free ``GET /rate_limit`` probe and budget-sized pages (a one-item probe per
  repository and ``ingest.rest.sizing.SizePlanner``);
* its tables: ``pull_requests`` (its fixed columns, its ``key``, then the typed, flattened
  columns of the rest of each pull request, evolving as the REST resource tables' do:
  ``ingest.rest.typed``, ``ingest.storage.evolve``; its nested lists are child tables,
  ``pull_requests__labels`` ..., replaced per pull request), ``github_pages`` (the ETags) and
  ``github_syncs`` (the ``updated_at`` watermark), one part per run and repository.

Each repository is one listing, paged as ``ingest.rest.pulls`` describes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Sequence
from typing import Any

import httpx
from pydantic import ValidationError

from ingest import __version__
from ingest.redact import register_secret
from ingest.rest import store
from ingest.rest.auth import Credentials, SecretLoader, resolve
from ingest.rest.client import RestClient
from ingest.rest.config import RestConfig
from ingest.rest.dialect import Dialect, RunStart
from ingest.rest.errors import (
    AuthError,
    PageError,
    RestTerminalError,
    SourceError,
)
from ingest.rest.pulls import GitHubDialect, SyncOptions
from ingest.rest.ratelimit import RateLimitGovernor
from ingest.rest.records import (
    GitHubSummary,
    RepoResult,
    RepoState,
)
from ingest.rest.run import fetch_source
from ingest.rest.sizing import (
    PER_PAGE_MAX,
    PRIOR,
    PROBE_SIZES,
    HostLimits,
    SizePlanner,
    choose_per_page,
)
from ingest.rest.source import Source
from ingest.rest.window import AdaptiveWindow
from ingest.settings import GitHubSettings, RestSettings
from ingest.storage.location import LakeLocation

log = logging.getLogger(__name__)

API_VERSION = "2022-11-28"
HEADERS = {
    "Accept": "application/vnd.github+json",
    "X-GitHub-Api-Version": API_VERSION,
    "User-Agent": f"nightly-ingest/{__version__}",
}
AUTH_HINT = "the token may be wrong or expired: check the GITHUB_TOKEN variable or the Secret block"
WHO = "this token (private repositories need a token with access)"
# GitHub's documented secondary limits: at most 100 requests in flight, and 900 points a
# minute for the REST API (a GET costs one point).
IN_FLIGHT = 100
PER_MINUTE = 900
# The tables a run of the dialect writes, which its runs keep trimmed and compacted.
TABLES = ("pull_requests", "pull_request_log", "api_requests", "github_pages", "github_syncs")


async def probe_rate_limit(gh: RestClient) -> int | None:
    """Remaining primary budget from ``GET /rate_limit`` (which GitHub does not count);
    None when rate limiting is disabled (the endpoint answers 404)."""
    try:
        answer = await gh.get("rate_limit")
    except AuthError:
        raise
    except RestTerminalError:  # 404: rate limiting is disabled on this server
        gh.governor.unlimited = True
        return None
    except PageError:  # unknown; the governor learns the budget from the first answer
        return None
    core = ((answer.data or {}).get("resources") or {}).get("core") or {}
    remaining = core.get("remaining")
    return int(remaining) if remaining is not None else None


# --------------------------------------------------------------------------- the source

# What a GitHub source leaves open is GitHub's own (sources/github.yaml writes the same):
# every pull request; the page size planned from measured latency; GitHub's documented
# ceiling of 100 requests in flight (the window finds less); 100 requests of the hourly
# budget never spent; a wait of up to 15 minutes for the budget's reset; and after a
# secondary limit without Retry-After, a first pause of 60 s (GitHub asks for at least a
# minute), at most 5 times per request.
DEFAULTS: dict[str, Any] = {
    "state": "all",
    "per_page": "auto",
    "concurrency": IN_FLIGHT,
    "reserve": 100,
    "max_wait": 900.0,
    "backoff": 60.0,
    "retries": 5,
}


def github_source(
    github: GitHubSettings,
    repos: Sequence[str],
    *,
    state: str | None = None,
    per_page: int | None = None,
    concurrency: int | None = None,
    base_url: str | None = None,
    token_block: str | None = None,
    rate_limit_reserve: int | None = None,
    max_wait: float | None = None,
    backoff: float | None = None,
    limit_retries: int | None = None,
) -> Source:
    """The source ``ingest github --repo`` and the ``github-pulls`` flow run: the pull
    requests of ``repos``, declared as ``sources/github.yaml`` declares them, with what is
    not given left to the dialect's defaults (``DEFAULTS``) and the API root to the
    worker's ``github_base_url``."""
    auth = {
        "type": "bearer",
        **({"secret": token_block} if token_block else {"env": "GITHUB_TOKEN"}),
    }
    given = {
        "state": state,
        "per_page": per_page,
        "concurrency": concurrency,
        "reserve": rate_limit_reserve,
        "max_wait": max_wait,
        "backoff": backoff,
        "retries": limit_retries,
    }
    knob = {**DEFAULTS, **{k: v for k, v in given.items() if v is not None}}
    declared = {
        "name": "github",
        "repos": list(dict.fromkeys(repos)),
        "client": {
            "dialect": "github",
            "base_url": base_url or github.base_url,
            "auth": auth,
            "paginator": {
                "type": "header_link",
                "page_size": knob["per_page"],
                "page_size_param": "per_page",
            },
            "concurrency": knob["concurrency"],
            "rate_limit": {k: knob[k] for k in ("reserve", "max_wait", "backoff", "retries")},
        },
        "resources": [
            {
                "name": "pulls",
                "table_name": "pull_requests",
                "endpoint": {
                    "path": "repos/{repo}/pulls",
                    "params": {"state": knob["state"], "sort": "updated", "direction": "desc"},
                },
            }
        ],
    }
    try:
        return Source.model_validate(declared)
    except ValidationError as exc:  # a bad repository name, state ...: one clear line each
        problems = [
            f"{'.'.join(str(p) for p in e['loc']) or 'options'}: "
            f"{e['msg'].removeprefix('Value error, ')}"
            for e in exc.errors()
        ]
        raise SourceError("; ".join(problems)) from exc


def state_of(source: Source) -> str:
    """The pull requests a dialect source lists: open, closed or all."""
    return str(source.resources[0].endpoint.params.get("state", "all"))


def per_page_of(source: Source) -> int | None:
    """The declared page size; None when automatic."""
    spec = source.resolved(source.resources[0]).endpoint.paginator
    size = spec.page_size if spec is not None else None
    return size if isinstance(size, int) else None


def github_token(
    source: Source, config: RestConfig, load_block: SecretLoader | None = None
) -> str | None:
    """The token: the Secret block the source names, else its variable (``GITHUB_TOKEN``),
    else ``INGEST_GITHUB_TOKEN``; None means unauthenticated (60 requests an hour)."""
    auth = source.client.auth
    token: str | None = None
    if auth is not None and auth.secret:
        token = resolve(auth, load_block)
    elif auth is not None and auth.env and os.environ.get(auth.env):
        token = os.environ[auth.env]
    elif (own := config.own_secret("github.token")) is not None:
        token = own.get_secret_value()  # this worker's INGEST_GITHUB_TOKEN
    register_secret(token)
    return token or None


def credentials(
    config: RestConfig,
    source: Source,
    load_block: SecretLoader | None = None,
    token: str | None = None,
) -> Credentials:
    """The ``Authorization`` header of the token (none without one), to the API's host only
    (the dialect's ``credentials`` hook)."""
    token = token or github_token(source, config, load_block)
    register_secret(token)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return Credentials(headers=headers, hint=AUTH_HINT)


class GitHub(Dialect):
    """GitHub's own ways, handed to the engine (``ingest.rest.dialect``): its headers and
    token, its retries, its documented limits, the repositories' stored page ETags and
    watermarks, and the run's hooks (``plan``: probes, ETags, pull-request rows)."""

    engine_state = False  # its state is the repositories' (github_pages, github_syncs)

    headers = HEADERS
    who = WHO

    credentials = staticmethod(credentials)

    def load_state(
        self, location: LakeLocation, source: Source, full_refresh: bool
    ) -> dict[str, RepoState]:
        """The repositories' stored ETags and watermarks (none on a full refresh)."""
        if full_refresh:
            return {r: RepoState() for r in source.repos}
        return store.load_repo_states(location, source.repos, state_of(source))

    async def start(self, client: RestClient, run: RunStart) -> GitHubDialect:
        return await plan(
            run.config,
            run.source,
            client,
            run_id=run.run_id,
            priors=run.state,
            full_refresh=run.full_refresh,
        )


GITHUB = GitHub()


def fetch_pulls(
    config: RestConfig,
    repos: Sequence[str],
    *,
    run_id: str,
    token: str | None = None,
    priors: dict[str, RepoState] | None = None,
    full_refresh: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
    part: str = "",
    **options: Any,
) -> GitHubSummary:
    """The pull requests of ``repos``: ``ingest.rest.run.fetch_source`` of the GitHub
    source that ``options`` declare (``github_source``'s: ``per_page``, ``concurrency``
    ...), with this dialect."""
    summary = fetch_source(
        config,
        github_source(config.github, repos, **options),
        run_id=run_id,
        token=token,
        priors=priors,
        full_refresh=full_refresh,
        transport=transport,
        part=part,
        dialect=GITHUB,
    )
    assert isinstance(summary, GitHubSummary)
    return summary


# --------------------------------------------------------------------------- one run


def planner_for(
    rest: RestSettings, listings: int, window: AdaptiveWindow, governor: RateLimitGovernor
) -> SizePlanner:
    """The planner of the repositories whose size is automatic: the latency fitted to
    their probes (the configured model the prior), GitHub's documented limits (at most
    ``IN_FLIGHT`` in flight, ``PER_MINUTE`` requests a minute; a lower ceiling the window
    knows, and the configured cap, bound them) and the share of the budget above the
    reserve (``rest_budget_share``) as it stands once they answered; the window is
    opened to the planned in-flight count."""

    def limits() -> HostLimits:
        budget = None
        if not governor.unlimited and governor.budget is not None:
            left = governor.budget.remaining - governor.pending  # not what is in flight
            budget = governor.spendable(rest.budget_share, left)
        in_flight = min(IN_FLIGHT, window.ceiling or window.maximum, window.maximum)
        return HostLimits(in_flight=in_flight, per_minute=PER_MINUTE, budget=budget)

    return SizePlanner(
        listings,
        latency=PRIOR,
        limits=limits,
        expected=rest.expected_rows,
        recheck=True,
        admit=window.admit,
    )


async def plan(
    config: RestConfig,
    source: Source,
    gh: RestClient,
    *,
    run_id: str,
    priors: dict[str, RepoState],
    full_refresh: bool,
) -> GitHubDialect:
    """The dialect of one run of ``source`` through ``gh``: each repository's page size
    (fixed, kept from its last sync, or automatic: planned after probes, or chosen up
    front for the budget ``GET /rate_limit`` shows), and each result stored as it ends."""
    window, governor = gh.window, gh.governor
    assert window is not None
    repos, state, fixed = list(source.repos), state_of(source), per_page_of(source)
    auto_for = [r for r in repos if not fixed and (full_refresh or priors[r].per_page is None)]
    planner: SizePlanner | None = None
    # Fewer such repositories than the window admits at once: their first pages would
    # leave it idle for a page's latency, so each is probed (page 1 with one pull
    # request) and all are sized together from what the probes showed
    # (ingest.rest.sizing). More of them fill the window with first pages anyway: their
    # size is chosen up front, for the budget GET /rate_limit (free) shows.
    if auto_for and len(auto_for) < window.size:
        planner = planner_for(config.rest, len(auto_for), window, governor)
        governor.learning = len(PROBE_SIZES)  # a repository's probes go out together
    budget = None
    if auto_for and planner is None:
        remaining = await probe_rate_limit(gh)
        if remaining is not None:
            budget = governor.spendable(config.rest.budget_share, remaining)
    # Up front (and for a repository whose probe fails): sized for the host's known
    # ceiling, else the initial window, not for the cap: a cap it may never reach asks
    # for small pages and many requests; see AdaptiveWindow.plan_size.
    auto = (
        choose_per_page(
            [priors[r].stored_items or config.rest.expected_rows for r in auto_for],
            concurrency=window.plan_size(config.http.initial_window),
            budget=budget,
            base_s=PRIOR.base_s,
            per_item_s=PRIOR.per_item_s,
        )
        if auto_for
        else PER_PAGE_MAX
    )

    def opts_for(repo: str) -> SyncOptions:
        kept = None if full_refresh else priors[repo].per_page
        return SyncOptions(
            state=state,
            per_page=fixed or kept or auto,
            full_refresh=full_refresh,
            run_id=run_id,
            planner=planner if planner is not None and repo in auto_for else None,
            stage_rows=stage_rows,
        )

    async def stage_rows(result: RepoResult) -> None:
        await asyncio.to_thread(store.write_pull_rows, config.location, run_id, result)

    async def on_result(result: RepoResult) -> None:
        await asyncio.to_thread(store.write_repo_result, config.location, run_id, result)

    dialect = GitHubDialect(repos, opts_for, priors, on_result, location=config.location)
    dialect.planner, dialect.per_page = planner, fixed or auto
    return dialect


def merge_summaries(run_id: str, parts: Sequence[GitHubSummary]) -> GitHubSummary:
    """One summary of a run whose repositories were fetched by several calls (tasks on
    a cluster): counts add up; ``max_in_flight`` is the most one call had in flight
    (the host's own count is the cluster's); the window is the smallest one remembered."""
    if len(parts) == 1:
        return parts[0]
    out = GitHubSummary(run_id=run_id)
    for s in parts:
        out.repos += s.repos
        out.errors += s.errors
        out.pulls += s.pulls
        out.records += s.records
        out.requests += s.requests
        out.not_modified += s.not_modified
        out.budget_spent += s.budget_spent
        out.failed_pages += s.failed_pages
        out.limit_answers += s.limit_answers
        out.shared_round_trips += s.shared_round_trips
        out.per_page = max(out.per_page, s.per_page)
        out.size_plan = "; ".join(p for p in (out.size_plan, s.size_plan) if p) or None
        out.size_plan_figures = out.size_plan_figures or s.size_plan_figures
        out.max_in_flight = max(out.max_in_flight, s.max_in_flight)
        out.shared_limit = out.shared_limit or s.shared_limit
        for change in s.schema_changes:  # a part sees the parts staged before it: once each
            if change not in out.schema_changes:
                out.schema_changes.append(change)
    stops = {reason for s in parts if s.stopped for reason in s.stopped.split("; ")}
    out.stopped = "; ".join(sorted(stops)) or None
    out.window = min((s.window for s in parts), default=0)
    ceilings = [s.ceiling for s in parts if s.ceiling is not None]
    out.ceiling = min(ceilings) if ceilings else None
    return out
