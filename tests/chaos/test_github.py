"""The GitHub API misbehaving: 502s, hangs, secondary limits, an exhausted budget,
pages that change while paging, and ``Link`` headers naming another host.

Each trial syncs against the GitHub-compatible server (``devservers.github``)
with seeded faults, then again without them, and compares the stored pull
requests with the server's own listing: every one present once, at its latest
``updated_at``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devservers.github import DevGitHub
from ingest import storage
from ingest.github.run import fetch_pulls
from ingest.settings import Settings
from tests.chaos.support import Trial, record, rng, timed, trials

TOKEN = "ghp_" + "ChaosTokenValue0123456789abcdefABCDEF"  # fake, built so no scanner flags it
REPO = "octo/chaos"


@pytest.fixture
def servers() -> Iterator[list[DevGitHub]]:
    started: list[DevGitHub] = []
    yield started
    for s in started:
        s.__exit__(None, None, None)


def start(started: list[DevGitHub], **config: Any) -> DevGitHub:
    server = DevGitHub(**config).__enter__()
    started.append(server)
    return server


def settings_for(server: DevGitHub, data_dir: Path, **kw: Any) -> Settings:
    base: dict[str, Any] = {
        "data_dir": data_dir,
        "github_base_url": server.url,
        "github_retry_base": 0.01,
        "github_retry_cap": 0.05,
        "github_secondary_backoff": 0.05,
        "github_timeout": 1.0,
        "github_max_wait": 0.0,
        "github_rate_limit_reserve": 10,
        "github_per_page": 10,
    }
    return Settings(**{**base, **kw})


def sync(settings: Settings, run_id: str) -> Any:
    summary = fetch_pulls(settings, [REPO], run_id=run_id, token=TOKEN)
    storage.commit_run(settings.data_dir, run_id)  # as the flow's commit-run task does
    return summary


def truth(server: DevGitHub) -> dict[int, str]:
    """The API's own listing: number -> updated_at (free of the faults: control port)."""
    out: dict[int, str] = {}
    page = 1
    headers = {"Authorization": f"Bearer {TOKEN}"}
    while True:
        r = httpx.get(
            f"{server.url}/repos/{REPO}/pulls",
            params={"state": "all", "per_page": 100, "page": page},
            headers=headers,
        )
        r.raise_for_status()
        items = r.json()
        out.update({p["number"]: p["updated_at"] for p in items})
        if len(items) < 100:
            return out
        page += 1


COMPARED: list[str] = []


def compare(server: DevGitHub, data_dir: Path) -> tuple[int, int]:
    """(lost or stale, duplicates) of the stored pull requests against the API."""
    expected = truth(server)
    _, stored = storage.query(
        data_dir,
        f"SELECT number, CAST(updated_at AS VARCHAR) FROM pull_requests WHERE repo = '{REPO}'",
    )
    numbers = [n for n, _ in stored]
    got = {n: u for n, u in stored}
    lost = [
        (n, u, got.get(n))
        for n, u in expected.items()
        if n not in got or not got[n].startswith(u[:19].replace("T", " "))
    ]
    COMPARED.append(str(lost[:5]))
    return len(lost), len(numbers) - len(set(numbers))


def trial_run(
    fault: str,
    point: str,
    server: DevGitHub,
    data_dir: Path,
    first_ok: Any,
    after_first: Any = None,
    **kw: Any,
) -> tuple[Trial, Any]:
    """The faulty run (server configured by the caller), then the clean one, then the check."""
    settings = settings_for(server, data_dir, **kw)
    first = sync(settings, "faulty")
    if after_first is not None:
        after_first()
    server.configure(faults=[], max_in_flight=100)
    server.set_budget(limit=5000, remaining=5000, reset_in=3600)
    with timed() as took:
        again = sync(settings_for(server, data_dir), "clean")
    lost, dup = compare(server, data_dir)
    ended = bool(first_ok(first)) and again.complete
    note = str(first.stopped or "")[:200] + (COMPARED[-1] if lost else "")
    t = record(Trial(fault, point, ended, lost, dup, 0, took[0], note=note))
    return t, first


FAULTS = [
    ("GitHub 502 answers", 3, 1),
    ("GitHub requests hang", 3, 0),
    ("GitHub secondary rate limit", 3, 0),
    ("GitHub budget exhausted", 3, 0),
    ("GitHub pages change while paging", 6, 1),
]


@pytest.mark.timeout(900)
@pytest.mark.parametrize(
    ("fault", "full", "quick"),
    FAULTS,
    ids=[str(f.values[0] if hasattr(f, "values") else f[0]) for f in FAULTS],
)
def test_github_fault_then_clean_rerun(
    fault: str, full: int, quick: int, servers: list[DevGitHub], tmp_path: Path
) -> None:
    n = trials(full, quick)
    if not n:
        pytest.skip("runs under make chaos")
    r = rng(fault)
    problems = []
    for i in range(n):
        pulls = r.randrange(150, 400)
        pages = -(-pulls // 10)
        kw: dict[str, Any] = {}
        if fault == "GitHub 502 answers":
            hit = sorted(r.sample(range(1, pages + 1), 4))
            config: dict[str, Any] = {
                "faults": [
                    {"kind": "502", "match": f"page={p}&", "times": r.randrange(1, 3)} for p in hit
                ]
            }
            point, ok = f"pages {hit}", lambda s: s.complete
        elif fault == "GitHub requests hang":
            hit = sorted(r.sample(range(2, pages + 1), 2))
            config = {
                "faults": [{"kind": "hang", "match": f"page={p}&", "times": 1} for p in hit],
                "hang_seconds": 5,
            }
            point, ok = f"pages {hit}", lambda s: s.complete
        elif fault == "GitHub secondary rate limit":
            limit = r.randrange(2, 5)
            config = {"max_in_flight": limit, "latency_base_ms": 20, "secondary_retry_after": 0.05}
            kw = {"github_concurrency": 12, "github_secondary_retries": 10}
            point, ok = f"{limit} in flight allowed", lambda s: s.complete
        elif fault == "GitHub budget exhausted":
            config = {}
            remaining = r.randrange(14, 30)
            point, ok = f"{remaining} requests left", lambda s: (not s.complete) and s.stopped
        else:
            config = {"latency_base_ms": 30}
            point, ok = "updates while paging", lambda s: True
        server = start(servers, repos={REPO: pulls}, token=TOKEN, **config)
        if fault == "GitHub budget exhausted":
            server.set_budget(limit=5000, remaining=remaining, reset_in=3600)
        stop = threading.Event()
        thread = threading.Thread(target=lambda: None)
        if fault == "GitHub pages change while paging":
            touched = [r.randrange(1, pulls + 1) for _ in range(30)]

            def churn(touched: list[int] = touched, stop: Any = stop, server: Any = server) -> None:
                for k in touched:
                    if stop.wait(0.01):
                        return
                    server.touch(REPO, [k], add=1 if k % 3 == 0 else 0)

            thread = threading.Thread(target=churn)
        thread.start()

        def calm(stop: Any = stop, thread: Any = thread) -> None:
            stop.set()
            thread.join()

        try:
            trial, _ = trial_run(
                fault, f"{pulls} PRs, {point}", server, tmp_path / f"t{i}", ok, calm, **kw
            )
        finally:
            calm()
        if not (trial.ended_as_expected and trial.lost == trial.duplicates == 0):
            problems.append(trial)
    assert not problems, problems


@pytest.mark.timeout(300)
def test_link_header_to_another_host_never_gets_the_token(
    servers: list[DevGitHub], tmp_path: Path
) -> None:
    fault = "GitHub Link header to another host"
    for i in range(trials(3, 1)):
        other = start(servers, repos={REPO: 120})
        server = start(servers, repos={REPO: 120}, token=TOKEN, link_base=other.url)
        settings = settings_for(server, tmp_path / f"t{i}", github_per_page=100)
        settings = settings.model_copy(update={"github_per_page": 10})
        sync(settings, "r")
        leaked = other.stats().get("authorization", 0)
        record(Trial(fault, f"Link to {other.url}", leaked == 0, 0, 0, 0, 0.0, f"{leaked} leaked"))
        assert leaked == 0, f"the token was sent to another host {leaked} times"
