"""The GitHub API misbehaving: 502s, hangs, secondary limits, an exhausted budget,
pages that change while paging, and ``Link`` headers naming another host.

Each trial runs the real command, ``ingest github``, in its own process against
the GitHub-compatible server (``dev.servers.github``) with seeded faults, and
reads what the person sees (exit status, the summary it prints); then the
github-pulls flow runs again without the faults, and the stored pull requests
are compared with the server's own listing: every one present once, at its
latest ``updated_at``. The token must never appear in the command's output.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from dev.servers.github import DevGitHub
from ingest import storage
from tests.chaos.support import Trial, record, rng, timed, trials
from tests.helpers import harness_api_url, run_cli

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

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


def cli_env(server: DevGitHub) -> dict[str, str]:
    """The environment of the faulty run: quick retries and a short timeout, so a trial
    takes seconds (every value an ``INGEST_*`` setting a user could set)."""
    base: dict[str, Any] = {"rest_retry_base": 0.01, "rest_retry_cap": 0.05, "rest_timeout": 1.0}
    env = {f"INGEST_{k.upper()}": str(v) for k, v in base.items()}
    return {**env, "GITHUB_TOKEN": TOKEN, "PREFECT_API_URL": harness_api_url()}


def cli_options(**kw: Any) -> list[str]:
    """The GitHub source's options of the faulty run (``ingest github --per-page`` ...):
    no wait for a spent budget, a small reserve, pages of 10."""
    given = {"max_wait": 0, "rate_limit_reserve": 10, "per_page": 10, **kw}
    return [x for k, v in given.items() for x in (f"--{k.replace('_', '-')}", str(v))]


@dataclass
class Command:
    """What ``ingest github`` did: exit status and what it printed."""

    code: int
    output: str

    @property
    def complete(self) -> bool:
        return self.code == 0 and f"{REPO}:" in self.output and "incomplete" not in self.output

    @property
    def stopped(self) -> str:
        found = re.search(r"stopped early: (.*)|incomplete: (.*)", self.output)
        return (found.group(1) or found.group(2)).strip() if found else ""


def run_command(server: DevGitHub, data_dir: Path, **kw: Any) -> Command:
    """``ingest github`` as a user runs it, in its own process."""
    args = ["github", "--repo", REPO, "--base-url", server.url, "--data-dir", str(data_dir)]
    proc = run_cli([*args, *cli_options(**kw)], env=cli_env(server))
    out, _ = proc.communicate(timeout=600)
    return Command(proc.returncode, out)


def clean_run(server: DevGitHub, data_dir: Path) -> Any:
    """The run without faults: the github-pulls flow (a real Prefect flow run)."""
    from flows.github_pulls import github_pulls

    return github_pulls(repos=[REPO], base_url=server.url, per_page=10, data_dir=str(data_dir))


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
) -> tuple[Trial, Command]:
    """The faulty run (server configured by the caller), then the clean one, then the check."""
    first = run_command(server, data_dir, **kw)
    if after_first is not None:
        after_first()
    server.configure(faults=[], max_in_flight=100)
    server.set_budget(limit=5000, remaining=5000, reset_in=3600)
    with timed() as took:
        again = clean_run(server, data_dir)
    lost, dup = compare(server, data_dir)
    leaked = TOKEN in first.output
    ended = bool(first_ok(first)) and again.complete and not leaked
    note = f"exit {first.code}; {first.stopped[:200]}" + (COMPARED[-1] if lost else "")
    if leaked:
        note += "; the token was printed"
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
            kw = {"concurrency": 12}
            point, ok = f"{limit} in flight allowed", lambda s: s.complete
        elif fault == "GitHub budget exhausted":
            config = {}
            remaining = r.randrange(14, 30)
            point, ok = f"{remaining} requests left", lambda s: "rate limit" in s.stopped
        else:
            config = {"latency_base_ms": 30}
            point, ok = "updates while paging", lambda s: s.code == 0
        server = start(servers, repos={REPO: pulls}, token=TOKEN, **config)
        if fault == "GitHub budget exhausted":
            server.set_budget(limit=5000, remaining=remaining, reset_in=3600)
        stop = threading.Event()
        thread = threading.Thread(target=lambda: None)
        if fault == "GitHub pages change while paging":
            touched = [r.randrange(1, pulls + 1) for _ in range(30)]

            def churn(touched: list[int] = touched, stop: Any = stop, server: Any = server) -> None:
                # The command's first request is the observable start of paging.
                while not server.stats().get("requests") and not stop.is_set():
                    time.sleep(0.01)  # polling the server for the command's first request
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
        done = run_command(server, tmp_path / f"t{i}")
        leaked = other.stats().get("authorization", 0)
        followed = other.stats().get("requests", 0)
        printed = TOKEN in done.output
        record(
            Trial(
                fault,
                f"Link to {other.url}",
                leaked == 0 and not printed,
                0,
                0,
                0,
                0.0,
                f"exit {done.code}; {followed} requests to the other host, {leaked} with the token",
            )
        )
        assert leaked == 0, f"the token was sent to another host {leaked} times"
        assert not printed, done.output[-2000:]
