"""One run of the GitHub source for many repositories: the plain function
under the ``fetch-pulls`` task, also used by the CLI tests and the benchmark."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import httpx

from ingest.github import store
from ingest.github.client import AUTH_HINT, GitHubClient, make_http_client
from ingest.github.records import GitHubSummary, RepoResult, RepoState
from ingest.github.sync import (
    PER_PAGE_MAX,
    SyncOptions,
    check_repo,
    choose_per_page,
    probe_rate_limit,
    summarize_result,
    sync_repos,
)
from ingest.rest import store as rest_store
from ingest.rest.aio import run_async
from ingest.rest.ratelimit import RateLimitGovernor, RetryPolicy
from ingest.rest.records import HostWindow
from ingest.rest.shared import SharedLimits, with_shared_limits
from ingest.rest.sizing import LatencyModel, SizePlanner
from ingest.rest.window import AdaptiveWindow
from ingest.settings import Settings


def governor_for(settings: Settings) -> RateLimitGovernor:
    return RateLimitGovernor(
        reserve=settings.github_rate_limit_reserve,
        max_wait=settings.github_max_wait,
        secondary_backoff=settings.github_secondary_backoff,
    )


def retry_for(settings: Settings) -> RetryPolicy:
    return RetryPolicy(
        max_attempts=settings.github_max_attempts,
        base=settings.github_retry_base,
        cap=settings.github_retry_cap,
    )


def fetch_pulls(
    settings: Settings,
    repos: Sequence[str],
    *,
    run_id: str,
    token: str | None = None,
    priors: dict[str, RepoState] | None = None,
    full_refresh: bool = False,
    transport: httpx.AsyncBaseTransport | None = None,
    part: str = "",
) -> GitHubSummary:
    """Sync the pull requests of ``repos`` into ``data_dir`` and summarise the run.

    ``part`` names this call's staged parts that belong to no repository (requests
    without one, the host's window) when several calls of one run each
    fetch some of its repositories (one task per repository on a cluster).

    Raises ``BadCredentialsError`` (401) at once; every other outcome is in the
    summary (per repository: complete or why it stopped, errors such as 404).
    """
    repos = [check_repo(r) for r in dict.fromkeys(repos)]
    if priors is None:
        priors = store.load_states(settings.lake, repos, settings.github_state)
    remembered = rest_store.load_window(settings.lake, host_of(settings.github_base_url))
    return run_async(
        with_shared_limits(
            settings,
            settings.github_base_url,
            lambda shared: _fetch(
                settings,
                repos,
                run_id,
                token,
                priors,
                full_refresh,
                transport,
                remembered,
                shared,
                part,
            ),
            in_flight=settings.github_concurrency,
            remembered=remembered,
        )
    )


def planner_for(
    settings: Settings, listings: int, window: AdaptiveWindow, governor: RateLimitGovernor
) -> SizePlanner:
    """The page-size planner of the repositories whose size is automatic: the configured
    latency model (scaled by the probes), the window's model, and the share of the
    budget above the reserve (``github_budget_share``) as it stands once they answered."""

    def budget() -> int | None:
        if governor.unlimited or governor.budget is None:
            return None
        above = max(0, governor.budget.remaining - governor.pending - governor.effective_reserve)
        return max(1, int(above * settings.github_budget_share))

    return SizePlanner(
        listings,
        latency=LatencyModel(settings.github_latency_base, settings.github_latency_per_item),
        finish=window.finish_seconds,
        budget=budget,
        expected=settings.github_expected_pulls,
        recheck=True,
    )


def host_of(url: str) -> str:
    return httpx.URL(url).netloc.decode()


def window_for(settings: Settings, remembered: tuple[int, int | None] | None) -> AdaptiveWindow:
    """The in-flight window: where the host's last run ended, else a safe start."""
    return AdaptiveWindow(
        initial=remembered[0] if remembered else settings.http_initial_window,
        maximum=settings.github_concurrency,
        ceiling=remembered[1] if remembered else None,
        adaptive=settings.http_adaptive,
        ramp=settings.http_ramp,
    )


async def _fetch(
    settings: Settings,
    repos: list[str],
    run_id: str,
    token: str | None,
    priors: dict[str, RepoState],
    full_refresh: bool,
    transport: httpx.AsyncBaseTransport | None,
    remembered: tuple[int, int | None] | None,
    shared: SharedLimits | None,
    part: str = "",
) -> GitHubSummary:
    started = time.perf_counter()
    window = window_for(settings, remembered)
    governor = governor_for(settings)
    summary = GitHubSummary(run_id=run_id)
    if shared is not None:
        governor.shared = shared.budget
    http = make_http_client(
        settings.github_base_url,
        token,
        concurrency=settings.github_concurrency,
        timeout=settings.github_timeout,
        transport=transport,
    )
    async with http:
        gh = GitHubClient(
            http,
            governor,
            retry_for(settings),
            concurrency=settings.github_concurrency,
            secondary_retries=settings.github_secondary_retries,
            run_id=run_id,
            window=window,
            auth_hint=AUTH_HINT,
            who="this token (private repositories need a token with access)",
            max_page_bytes=settings.http_max_page_bytes,
            shared=shared.slots if shared is not None else None,
        )
        results: list[RepoResult] = []
        planner: SizePlanner | None = None
        try:
            auto_for = [
                r
                for r in repos
                if not settings.github_per_page and (full_refresh or priors[r].per_page is None)
            ]
            # Fewer such repositories than the window admits at once: their first pages
            # would leave it idle for a page's latency, so each is probed (page 1 with one
            # pull request) and all are sized together from what the probes showed
            # (ingest.rest.sizing). More of them fill the window with first pages anyway:
            # their size is chosen up front, for the budget GET /rate_limit (free) shows.
            if auto_for and len(auto_for) < window.size:
                planner = planner_for(settings, len(auto_for), window, governor)
            budget = None
            if auto_for and planner is None:
                remaining = await probe_rate_limit(gh)
                if remaining is not None:
                    above = max(0, remaining - governor.effective_reserve)
                    budget = max(1, int(above * settings.github_budget_share))
            # Up front (and for a repository whose probe fails): sized for the host's known
            # ceiling, else the initial window, not for the cap: a cap it may never reach
            # asks for small pages and many requests; see AdaptiveWindow.plan_size.
            auto = (
                choose_per_page(
                    [priors[r].stored_items or settings.github_expected_pulls for r in auto_for],
                    concurrency=window.plan_size(settings.http_initial_window),
                    budget=budget,
                    base_s=settings.github_latency_base,
                    per_item_s=settings.github_latency_per_item,
                )
                if auto_for
                else PER_PAGE_MAX
            )

            def opts_for(repo: str) -> SyncOptions:
                kept = None if full_refresh else priors[repo].per_page
                return SyncOptions(
                    state=settings.github_state,
                    per_page=settings.github_per_page or kept or auto,
                    full_refresh=full_refresh,
                    run_id=run_id,
                    concurrency=settings.github_concurrency,
                    planner=planner if planner is not None and repo in auto_for else None,
                )

            async def on_result(result: RepoResult) -> None:
                await asyncio.to_thread(store.write_result, settings.lake, run_id, result)

            summary.per_page = settings.github_per_page or auto
            results = await sync_repos(gh, repos, opts_for, priors, on_result)
        finally:
            store.write_requests(
                settings.lake, run_id, f"rate-limit{part}", [r for r in gh.requests if not r.repo]
            )
            size, ceiling = window.remembered()
            if settings.http_adaptive:
                rest_store.write_run(
                    settings.lake,
                    run_id,
                    f"github{part}",
                    [],
                    HostWindow(
                        host=host_of(settings.github_base_url),
                        window_size=size,
                        ceiling=ceiling,
                        limit_answers=window.limit_answers,
                        requests=len(gh.requests),
                        run_id=run_id,
                        updated_at=datetime.now(UTC),
                    ),
                )
    summary.repos = [summarize_result(r) for r in results]
    summary.pulls = sum(len(r.pulls) for r in results)
    summary.requests = len(gh.requests)
    summary.not_modified = sum(1 for r in gh.requests if r.status == 304)
    summary.budget_spent = sum(
        1 for r in gh.requests if r.repo and r.status is not None and r.status != 304
    )
    summary.per_page = max((r.sync.per_page for r in results), default=summary.per_page)
    if planner is not None and planner.plan is not None:
        summary.size_plan = planner.plan.describe()
    summary.failed_pages = sum(r.sync.failed_pages for r in results)
    stops = {r.sync.stop_reason for r in results if r.sync.stop_reason and not r.error}
    summary.stopped = "; ".join(sorted(stops)) or None
    summary.errors = [(r.repo, r.error) for r in results if r.error]
    summary.max_in_flight = gh.max_in_flight
    summary.window, summary.ceiling = window.remembered()
    summary.limit_answers = sum(1 for r in gh.requests if r.status in (403, 429))
    if shared is not None:
        summary.shared_limit = shared.slots.name
        summary.shared_round_trips = shared.round_trips
    summary.seconds = time.perf_counter() - started
    return summary


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
        out.requests += s.requests
        out.not_modified += s.not_modified
        out.budget_spent += s.budget_spent
        out.failed_pages += s.failed_pages
        out.limit_answers += s.limit_answers
        out.shared_round_trips += s.shared_round_trips
        out.per_page = max(out.per_page, s.per_page)
        out.size_plan = "; ".join(p for p in (out.size_plan, s.size_plan) if p) or None
        out.max_in_flight = max(out.max_in_flight, s.max_in_flight)
        out.shared_limit = out.shared_limit or s.shared_limit
    stops = {reason for s in parts if s.stopped for reason in s.stopped.split("; ")}
    out.stopped = "; ".join(sorted(stops)) or None
    out.window = min((s.window for s in parts), default=0)
    ceilings = [s.ceiling for s in parts if s.ceiling is not None]
    out.ceiling = min(ceilings) if ceilings else None
    return out
