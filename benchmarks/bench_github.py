"""GitHub pull-request paging benchmark: ``ingest github`` side by side with
sequential paging as the popular clients do it (octokit's ``paginate``,
PyGithub, dlt's REST client: one page after another, following ``next``).

One GitHub-compatible server (``dev.servers.github``) runs in its own process
on loopback per scenario, with GitHub's secondary limit at 100 requests in
flight and a latency of ``base + per item`` per page (80 ms + 8 ms by
default, which makes ``per_page=10`` answer ~5x faster than ``per_page=100``,
close to the field report's ~7x). Scenarios:

* ``one-repo``     480 pull requests in one repository;
* ``many-repos``   20 repositories of 200 pull requests.

Contenders, one after the other on the same server (budget and counters reset
before each):

* ``seq-100``      sequential httpx loop, ``per_page=100``, following ``rel="next"``;
* ``seq-10``       the same with ``per_page=10``;
* ``ingest``       ``ingest github``'s fetch (the ``fetch-pulls`` task body: load the
                   stored state, page concurrently, write Parquet), automatic per_page,
                   fresh data folder; median of ``--repeats`` runs;
* ``ingest-rerun`` the same again on the same data folder, nothing changed;
* ``ingest-pN``    (one-repo only) fixed ``per_page`` N, to show the page-size trade-off.

Requests, budget spent, peak requests in flight and rate-limit answers are
counted by the server. Prefect's own start-up (an ephemeral server, ~10 s)
is not part of the figures: it is the same for any flow.

Run ``python -m benchmarks.bench_github`` (``--help`` for options); the
results are printed and written to ``benchmarks/github.md``.

Hidden in-flight ceilings (``--only ceilings``, written to
``benchmarks/github_ceilings.md``): the same server refusing more than C requests
in flight (C = 8, 20, 100; 403 "secondary rate limit" with ``Retry-After: 1``, as
GitHub answers), 20 repositories of 500 pull requests, side by side:

* ``seq-100``        the sequential client, ``per_page=100`` (it never meets the
                     ceiling, so it is measured once and shown for each C);
* ``fixed-N``        ``ingest github``'s fetch with the window fixed at N
                     (``http.adaptive`` false) for N in C/2, C, 2C and 32 (the
                     earlier default): the best of them is the fixed-concurrency
                     client tuned for that server;
* ``adaptive``       the same fetch with its defaults: the adaptive window (up to
                     ``concurrency``, 100, in flight), fresh data folder: it
                     starts at ``http.initial_window`` (4) and has to find C;
* ``adaptive-warm``  again on the same folder (``full_refresh``: every page fetched
                     again), starting from the window the first run remembered.

Every contender but ``seq-100`` runs once per round (``--rounds``, 5), in an order
that rotates between rounds; the figures are medians with their spread, and the
ratios are medians of per-round ratios.

First contact (``--only first-contact``, a section of ``benchmarks/github.md`` per
server model; about 4 minutes at the default one, 10-15 at the field report's): one
repository of 480 pull requests on a server allowing 20 requests in flight (or
``--in-flight``), which the client is not told (it plans within GitHub's documented
100), at 80 ms + 8 ms an item (or ``--base-ms``, ``--item-ms``), side by side in one run:

* ``flow``           the ``github-pulls`` flow, a real flow run against a ``prefect
                     server`` the benchmark starts, in a warm child process, a fresh data
                     folder each run (a first run); its figure is the flow run's whole
                     work, Running to Completed (fetch, every commit, the summary, the
                     warehouse views); with ``--before REV`` also ``flow at REV``, the same
                     from a temporary worktree of REV;
* ``fixed-PxC``      the best plain client of fixed concurrency for that server
                     (per_page P, C in flight), found by a search over both first;
* ``seq-100``        the sequential client;
* ``command``        ``ingest github`` as a user runs it (a new process) on a fresh data
                     folder, then again on it with nothing changed (no work: the
                     command's fixed cost, and a rerun that must spend no budget).

The field report's model (the targets: at most 1.0x the best fixed client, at least 12x
faster than ``seq-100``)::

    make bench-github ARGS="--only first-contact --base-ms 260 --item-ms 44 \
        --in-flight 100 --target-fixed 1.0 --target-seq 12"

Rounds rotate the order (``--rounds``, 5); ratios are medians of per-round ratios.
The section adds each flow run's stages and the commit path alone per checkout
(``make bench-github ARGS="--only first-contact --before main"``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from benchmarks.measure import cpu_model
from dev.servers.github import DevGitHub
from ingest import storage
from ingest.rest.config import RestConfig
from ingest.rest.github import fetch_pulls
from ingest.settings import Settings

OUT = Path(__file__).resolve().parent / "github.md"
ROOT = Path(__file__).resolve().parent.parent
WORK = Path(__file__).resolve().parent / ".work"
TOKEN = "bench-token-not-a-secret"
GITHUB_IN_FLIGHT = 100


@dataclass
class Result:
    scenario: str
    contender: str
    seconds: float
    requests: int
    budget: int
    max_in_flight: int
    rate_limited: int
    pulls: int
    per_page: int | str


def sequential(base_url: str, repos: list[str], per_page: int) -> int:
    """What the popular clients do: one page after another, following ``next``."""
    seen: set[tuple[str, int]] = set()
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/vnd.github+json"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=60, trust_env=False) as client:
        for repo in repos:
            url: str | None = (
                f"/repos/{repo}/pulls?state=all&sort=updated&direction=desc&per_page={per_page}"
            )
            while url:
                response = client.get(url)
                response.raise_for_status()
                seen.update((repo, pr["number"]) for pr in response.json())
                url = response.links.get("next", {}).get("url")
    return len(seen)


def measure(server: DevGitHub, scenario: str, contender: str, fn: Any) -> Result:
    server.set_budget(limit=5000, remaining=5000, reset_in=3600)
    server.reset_stats()
    start = time.perf_counter()
    pulls, per_page = fn()
    seconds = time.perf_counter() - start
    stats = server.stats()
    return Result(
        scenario=scenario,
        contender=contender,
        seconds=seconds,
        requests=int(stats.get("requests", 0)),
        budget=5000 - int(stats["remaining"].get("authenticated", 5000)),
        max_in_flight=int(stats.get("max_in_flight", 0)),
        rate_limited=int(stats.get("secondary", 0)) + int(stats.get("primary_limited", 0)),
        pulls=pulls,
        per_page=per_page,
    )


def run_scenario(
    name: str, repos: dict[str, int], args: argparse.Namespace, sweep: bool
) -> list[Result]:
    results: list[Result] = []
    expected = sum(repos.values())
    with DevGitHub(
        repos=repos,
        token=TOKEN,
        latency_base_ms=args.base_ms,
        latency_per_item_ms=args.item_ms,
        max_in_flight=GITHUB_IN_FLIGHT,
    ) as server:
        names = list(repos)

        def settings(data_dir: Path) -> Settings:
            return Settings(data_dir=data_dir, github={"base_url": server.url})

        staged: list[tuple[Path, str]] = []

        def ingest(data_dir: Path, **kw: Any) -> tuple[int, int]:
            run_id = f"r{time.time_ns()}"
            s = fetch_pulls(
                RestConfig.of(settings(data_dir)),
                names,
                run_id=run_id,
                token=TOKEN,
                concurrency=args.concurrency,
                max_wait=0,
                **kw,
            )
            assert s.complete, s.repos
            staged.append((data_dir, run_id))
            return s.pulls, s.per_page

        def commit_staged() -> None:
            """Commit what the measured fetch staged, as the flow's end does (not timed):
            the re-run reads the ETags and watermark the first run stored."""
            while staged:
                storage.commit_run(*staged.pop())

        for per_page in (100, 10):
            r = measure(
                server,
                name,
                f"seq-{per_page}",
                lambda p=per_page: (sequential(server.url, names, p), p),
            )
            results.append(r)
            print(row(r), flush=True)
        firsts, reruns = [], []
        for _ in range(args.repeats):
            with tempfile.TemporaryDirectory() as tmp:
                firsts.append(measure(server, name, "ingest", lambda d=Path(tmp): ingest(d)))
                commit_staged()
                reruns.append(measure(server, name, "ingest-rerun", lambda d=Path(tmp): ingest(d)))
                commit_staged()
        for group in (firsts, reruns):
            r = median(group)
            results.append(r)
            print(row(r), flush=True)
        if sweep:
            for per_page in (10, 25, 50, 100):
                with tempfile.TemporaryDirectory() as tmp:
                    group = [
                        measure(
                            server,
                            name,
                            f"ingest-p{per_page}",
                            lambda d=Path(tmp), p=per_page: ingest(d, per_page=p),
                        )
                        for _ in range(1)
                    ]
                    commit_staged()
                r = median(group)
                results.append(r)
                print(row(r), flush=True)
    for r in results:
        if r.contender != "ingest-rerun":
            assert r.pulls == expected, (r.contender, r.pulls, expected)
    return results


def median(group: list[Result]) -> Result:
    ordered = sorted(group, key=lambda r: r.seconds)
    return ordered[len(ordered) // 2]


def row(r: Result) -> str:
    return (
        f"| {r.scenario} | {r.contender} | {r.per_page} | {r.seconds:.2f} | {r.requests} | "
        f"{r.budget} | {r.max_in_flight} | {r.rate_limited} | {r.pulls} |"
    )


HEADER = (
    "| scenario | contender | per_page | wall s | requests | budget spent | "
    "max in flight | rate-limit answers | pull requests |\n|---|---|---|---|---|---|---|---|---|"
)


def ratios(results: list[Result]) -> list[str]:
    lines = []
    by = {(r.scenario, r.contender): r for r in results}
    for scenario in dict.fromkeys(r.scenario for r in results):
        ours = by[(scenario, "ingest")]
        for base in ("seq-100", "seq-10"):
            b = by[(scenario, base)]
            lines.append(
                f"* {scenario}: `ingest github` is **{b.seconds / ours.seconds:.1f}x** faster than "
                f"`{base}` ({b.seconds:.2f} s -> {ours.seconds:.2f} s), spending {ours.budget} "
                f"requests of budget against {b.budget}."
            )
        rerun = by[(scenario, "ingest-rerun")]
        lines.append(
            f"* {scenario}: no-change re-run {rerun.seconds:.2f} s, {rerun.requests} requests, "
            f"**{rerun.budget} budget spent** (every answer a 304)."
        )
    return lines


def machine() -> str:
    cpu = cpu_model()
    date = subprocess.run(
        ["date", "-u", "+%Y-%m-%d %H:%M UTC"], capture_output=True, text=True
    ).stdout.strip()
    return (
        f"{date}; {os.cpu_count()} cores ({cpu}); "
        f"Python {platform.python_version()}; {platform.system()}"
    )


# ------------------------------------------------------------------ first contact
#
# One repository on a host the client has never seen: the github-pulls flow's whole
# work (a real flow run against a running `prefect server`) beside the best client of
# fixed concurrency for that server, found by a search, and the sequential client.

FIRST_REPO = "octo/first"
SEARCH_PER_PAGE = (5, 10, 16, 20, 24, 30, 40, 48, 60, 100)
# requests in flight searched, as shares of the server's ceiling (one above it, to show
# what a limit answer costs)
SEARCH_SHARES = (0.2, 0.4, 0.6, 0.8, 0.96, 1.0, 1.2)


def search_in_flight(ceiling: int) -> tuple[int, ...]:
    """The in-flight counts the fixed client is tried at, for a server allowing
    ``ceiling``: 4, 8, 12, 16, 19, 20, 24 for 20; 20, 40 ... 96, 100, 120 for 100."""
    return tuple(sorted({max(1, round(ceiling * f)) for f in SEARCH_SHARES}))


# The flow in a child process of its own checkout (this tree, or --before's): one flow
# run per line read, a fresh data folder each (a first run); it answers one JSON line.
# Only what every revision has is used: the flow, the Prefect client, ingest.storage.
FLOW_CHILD = """
import json, sys, time
from flows.github_pulls import github_pulls
from ingest import storage
from prefect.client.orchestration import get_client
try:  # a revision whose sources own their tables: hand them to storage, as a run does
    from ingest import catalog
    catalog.load()
except ImportError:
    pass


def commit_cost(job):
    # The commit path alone: a first run staged by the fetch, committed to new tables with
    # the warehouse views, then a full refresh of the same folder (a MERGE into them).
    import os
    try:
        from ingest.rest.github import fetch_pulls
    except ImportError:  # a revision from before the dialect object
        try:
            from ingest.rest.run import fetch_pulls
        except ImportError:  # a revision from before the GitHub dialect joined ingest.rest
            from ingest.github.run import fetch_pulls
    from ingest.settings import Settings
    try:
        from ingest.rest.config import RestConfig
        config = RestConfig.of
    except ImportError:  # a revision from before RestConfig: the fetch took the Settings
        config = lambda settings: settings

    settings = Settings(data_dir=job["data_dir"], github={"base_url": job["base_url"]})
    out = {}
    for label, full in (("first", False), ("again", True)):
        run_id = f"commit-{label}-{time.time_ns()}"
        storage.prepare(settings.location, current_run=run_id)
        fetch_pulls(
            config(settings), [job["repo"]], run_id=run_id, token=os.environ["GITHUB_TOKEN"],
            full_refresh=full,
        )
        t0 = time.perf_counter()
        report = storage.commit_run(settings.location, run_id)
        t1 = time.perf_counter()
        storage.refresh_warehouse(settings.location, tables=report.rows)
        out[label] = [t1 - t0, time.perf_counter() - t1, sum(report.rows.values())]
    return out


from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

for line in sys.stdin:
    job = json.loads(line)
    if job.get("kind") == "commit":
        print("RESULT " + json.dumps(commit_cost(job)), flush=True)
        continue
    t0 = time.perf_counter()
    # as `ingest github` runs it: without Prefect's heartbeat thread, which the end of a
    # flow run joins while it sleeps out its second (the same for every revision)
    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        state = github_pulls(
            repos=[job["repo"]], base_url=job["base_url"], data_dir=job["data_dir"],
            return_state=True,
        )
    call = time.perf_counter() - t0
    s = state.result()
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(state.state_details.flow_run_id)
    _, rows = storage.query(
        job["data_dir"],
        "SELECT task_name, sum(seconds) FROM task_timings GROUP BY task_name",
    )
    _, stored = storage.query(
        job["data_dir"], "SELECT count(*), count(DISTINCT number) FROM pull_requests"
    )
    print("RESULT " + json.dumps({
        "span": (run.end_time - run.start_time).total_seconds(),
        "call": call,
        "per_page": s.per_page,
        "pulls": s.pulls,
        "stored": list(stored[0]),
        "tasks": {name: float(sec) for name, sec in rows},
    }), flush=True)
"""


class FlowChild:
    """A warm process running the github-pulls flow of one checkout, run by run."""

    def __init__(self, name: str, root: Path, env: dict[str, str], log: Path) -> None:
        self.name, self.root = name, root
        self.log = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", FLOW_CHILD],
            cwd=root,
            env={**env, "PYTHONPATH": str(root)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )

    def run(self, base_url: str, data_dir: Path, kind: str = "flow") -> dict[str, Any]:
        """One flow run (``kind="flow"``), or the commit path alone (``"commit"``)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        job = {"repo": FIRST_REPO, "base_url": base_url, "data_dir": str(data_dir), "kind": kind}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                return dict(json.loads(line[len("RESULT ") :]))
        raise RuntimeError(f"{self.name}: the flow's process ended; see {self.log.name}")

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def fixed_client(base_url: str, repo: str, per_page: int, in_flight: int) -> int:
    """A plain client tuned by hand: page 1, then every page its ``rel="last"`` names,
    at most ``in_flight`` at once; a limit answer waits ``Retry-After`` and asks again."""
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/vnd.github+json"}
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    slots = asyncio.Semaphore(in_flight)
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=60, trust_env=False
    ) as client:

        async def get(url: str) -> httpx.Response:
            while True:
                async with slots:
                    response = await client.get(url)
                if response.status_code in (403, 429) and "retry-after" in response.headers:
                    await asyncio.sleep(float(response.headers["retry-after"]))
                    continue
                response.raise_for_status()
                return response

        first = await get(
            f"/repos/{repo}/pulls?state=all&sort=updated&direction=desc&per_page={per_page}"
        )
        seen = {pr["number"] for pr in first.json()}
        last = first.links.get("last", {}).get("url")
        if last:
            pages = int(httpx.URL(last).params["page"])
            urls = [str(httpx.URL(last).copy_set_param("page", n)) for n in range(2, pages + 1)]
            for response in await asyncio.gather(*(get(u) for u in urls)):
                seen.update(pr["number"] for pr in response.json())
    return len(seen)


@dataclass
class Sample:
    """One contender's run in one round."""

    seconds: float
    requests: int
    budget: int
    max_in_flight: int
    limit_answers: int
    per_page: int
    flow: dict[str, Any] | None = None


def sample(server: DevGitHub, fn: Any) -> Sample:
    """Run ``fn`` (returns (seconds, per_page, flow figures or None)) on a fresh budget."""
    server.set_budget(limit=5000, remaining=5000, reset_in=3600)
    server.reset_stats()
    seconds, per_page, flow = fn()
    stats = server.stats()
    return Sample(
        seconds=seconds,
        requests=int(stats.get("requests", 0)),
        budget=5000 - int(stats["remaining"].get("authenticated", 5000)),
        max_in_flight=int(stats.get("max_in_flight", 0)),
        limit_answers=int(stats.get("secondary", 0)) + int(stats.get("primary_limited", 0)),
        per_page=per_page,
        flow=flow,
    )


def timed_client(server: DevGitHub, per_page: int, in_flight: int, pulls: int) -> Sample:
    def go() -> tuple[float, int, None]:
        t0 = time.perf_counter()
        got = asyncio.run(fixed_client(server.url, FIRST_REPO, per_page, in_flight))
        assert got == pulls, (per_page, in_flight, got)
        return time.perf_counter() - t0, per_page, None

    return sample(server, go)


def ingest_command(base_url: str, env: dict[str, str], data_dir: Path) -> float:
    """Wall seconds of ``ingest github`` as a user runs it (a new process: imports, the
    flow run on the benchmark's Prefect server, the summary printed)."""
    argv = [str(Path(sys.executable).parent / "ingest"), "github", "--repo", FIRST_REPO]
    argv += ["--base-url", base_url, "--data-dir", str(data_dir)]
    t0 = time.perf_counter()
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or f"{FIRST_REPO}:" not in done.stdout:
        raise RuntimeError(f"ingest github failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds


def commands(
    server: DevGitHub, env: dict[str, str], scratch: Path, counter: Any, pulls: int
) -> Sample:
    """``ingest github`` on a fresh data folder (a first run), then again on the same
    folder with nothing changed: the no-work command, whose time is the command's fixed
    cost (process, imports, flow run, one 304 round trip) and whose budget must be 0."""
    data = scratch / f"command-{next(counter)}"

    def first() -> tuple[float, int, None]:
        return ingest_command(server.url, env, data), 0, None

    def again() -> tuple[float, int, None]:
        return ingest_command(server.url, env, data), 0, None

    out = sample(server, first)
    noop = sample(server, again)
    _, stored = storage.query(str(data), "SELECT count(DISTINCT number) FROM pull_requests")
    assert stored[0][0] == pulls, stored
    out.flow = {
        "noop_seconds": noop.seconds,
        "noop_budget": noop.budget,
        "noop_requests": noop.requests,
    }
    return out


def med(values: list[float]) -> float:
    return float(statistics.median(values))


def run_first_contact(args: argparse.Namespace) -> str:
    """The comparison; returns the Markdown section for github.md."""
    from benchmarks.bench_commands import checkout
    from benchmarks.bench_s3 import child_env
    from deployments.serve import PrefectServer
    from dev.servers.child import free_port

    pulls = args.pulls
    per_pages = (10, 24, 48) if args.quick else SEARCH_PER_PAGE
    in_flights = (8, 20) if args.quick else search_in_flight(args.in_flight)
    load_start = "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    WORK.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix="first-contact-", dir=WORK))
    rounds: list[dict[str, Sample]] = []
    commits: dict[str, list[dict[str, list[float]]]] = {}
    search: dict[tuple[int, int], list[float]] = {}
    children: list[FlowChild] = []
    try:
        with ExitStack() as stack:
            server = stack.enter_context(
                DevGitHub(
                    repos={FIRST_REPO: pulls},
                    token=TOKEN,
                    latency_base_ms=args.base_ms,
                    latency_per_item_ms=args.item_ms,
                    max_in_flight=args.in_flight,
                    secondary_retry_after=1.0,
                )
            )
            env = child_env(scratch)
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["GITHUB_TOKEN"] = TOKEN
            log = stack.enter_context(open(scratch / "prefect-server.log", "w"))
            prefect = stack.enter_context(
                PrefectServer(port=free_port(), home=scratch / "server-home", env=env, log=log)
            )
            env.update(PREFECT_API_URL=prefect.api_url, PREFECT_HOME=str(scratch / "client"))
            roots = [("flow", ROOT)]
            if args.before:
                roots.append((f"flow at {args.before}", stack.enter_context(checkout(args.before))))
            for name, root in roots:
                child = FlowChild(name, root, env, scratch / f"{len(children)}.log")
                children.append(child)
            counter = iter(range(1_000_000))

            def flow(child: FlowChild) -> Sample:
                def go() -> tuple[float, int, dict[str, Any]]:
                    out = child.run(server.url, scratch / f"data-{next(counter)}")
                    assert out["pulls"] == pulls and out["stored"] == [pulls, pulls], out
                    return float(out["span"]), int(out["per_page"]), out

                return sample(server, go)

            print("warm-up (not measured): a first flow run in each process", flush=True)
            for child in children:
                flow(child)
            print("search: the fixed client's per_page x in-flight", flush=True)
            for _ in range(args.search_repeats):
                for p in per_pages:
                    for c in in_flights:
                        search.setdefault((p, c), []).append(
                            timed_client(server, p, c, pulls).seconds
                        )
            best = min(search, key=lambda k: med(search[k]))
            print(f"  best: per_page {best[0]}, {best[1]} in flight, {med(search[best]):.2f} s")

            contenders: dict[str, Any] = {c.name: (lambda c=c: flow(c)) for c in children}
            contenders[f"fixed-{best[0]}x{best[1]}"] = lambda: timed_client(
                server, best[0], best[1], pulls
            )

            def seq() -> Sample:
                def go() -> tuple[float, int, None]:
                    t0 = time.perf_counter()
                    assert sequential(server.url, [FIRST_REPO], 100) == pulls
                    return time.perf_counter() - t0, 100, None

                return sample(server, go)

            contenders["seq-100"] = seq
            if not args.no_command:
                contenders["command"] = lambda: commands(server, env, scratch, counter, pulls)
            names = list(contenders)
            for i in range(args.rounds):
                order = names[i % len(names) :] + names[: i % len(names)]
                got = {name: contenders[name]() for name in order}
                rounds.append(got)
                print(
                    f"  round {i + 1}: "
                    + ", ".join(f"{k} {v.seconds:.2f}s" for k, v in got.items()),
                    flush=True,
                )
            print("the commit path alone, per checkout", flush=True)
            for i in range(args.rounds):
                for child in children[i % len(children) :] + children[: i % len(children)]:
                    data = scratch / f"commit-{next(counter)}"
                    commits.setdefault(child.name, []).append(
                        child.run(server.url, data, kind="commit")
                    )
    finally:
        for child in children:
            child.close()
        shutil.rmtree(scratch, ignore_errors=True)
    load_end = "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    return first_contact_report(args, rounds, commits, search, best, load_start, load_end)


def first_contact_report(
    args: argparse.Namespace,
    rounds: list[dict[str, Sample]],
    commits: dict[str, list[dict[str, list[float]]]],
    search: dict[tuple[int, int], list[float]],
    best: tuple[int, int],
    load_start: str,
    load_end: str,
) -> str:
    names = list(rounds[0])
    fixed = f"fixed-{best[0]}x{best[1]}"
    flows = [n for n in names if n.startswith("flow")]

    def col(name: str, attr: str) -> list[float]:
        return [float(getattr(r[name], attr)) for r in rounds]

    def typical(name: str) -> Sample:
        ordered = sorted((r[name] for r in rounds), key=lambda s: s.seconds)
        return ordered[len(ordered) // 2]

    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "python -m benchmarks.bench_github " + " ".join(args.argv)
    lines = [
        f"## First contact: one repository, the flow's whole work ({now})",
        "",
        f"Measured {machine()}, with `{command}`.",
        "",
        f"One repository of {args.pulls} pull requests on `dev.servers.github` (its own "
        f"process on loopback): latency {args.base_ms:.0f} ms + {args.item_ms:.0f} ms per item "
        f"of a page, at most {args.in_flight} requests in flight (beyond: 403 secondary rate "
        "limit, `Retry-After: 1`), 5,000 requests of budget reset before every contender. "
        "The flow is not told this server's ceiling: it plans within GitHub's documented 100 "
        "in flight and 900 requests a minute, from the latency its two probes measure. "
        f"Contenders, in an order that rotates from round to round, {args.rounds} rounds:",
        "",
        "* `flow`: the `github-pulls` flow of this tree, a real flow run against a running "
        "`prefect server` (started by the benchmark, SQLite), in a warm process of its own "
        "(one flow run before the rounds, not measured; as `ingest github` runs it, without "
        "Prefect's heartbeat thread), a fresh data folder each run: "
        "a first run, automatic `per_page`, default settings. Its figure is the flow run's "
        "whole work: Running to Completed as the server recorded it (load the state, "
        "fetch, commit every table, the summary's artifacts, the warehouse views)."
        + (
            f" `flow at {args.before}`: the same from a checkout of `{args.before}` in a "
            "temporary worktree, same server, same rounds."
            if args.before
            else ""
        ),
        f"* `{fixed}`: the best plain client of fixed concurrency for this server: async "
        'httpx, page 1, then the pages its `rel="last"` names, `per_page` x in-flight '
        f"searched over {len(search)} pairs before the rounds (table below); it stores "
        "nothing.",
        '* `seq-100`: one page after another, `per_page=100`, following `rel="next"` (what '
        "octokit's `paginate`, PyGithub and dlt do).",
        "* `command`: `ingest github --repo ... --base-url ... --data-dir ...` as a user runs "
        "it, a new process (imports, the flow run on the same Prefect server, the summary "
        "printed), a fresh data folder: a first run; then the same command again on that "
        "folder, nothing changed (*no work*: its time is the command's fixed cost, and it "
        "must spend no budget).",
        "",
        "Wall seconds: median of the rounds (lowest-highest); requests, budget, peak in "
        "flight and limit answers counted by the server, in the median round.",
        "",
        "| contender | per_page | wall s | requests | budget spent | max in flight "
        "| limit answers |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in names:
        t = typical(name)
        lines.append(
            f"| {name} | {t.per_page} | {spread(col(name, 'seconds'))} | {t.requests} | "
            f"{t.budget} | {t.max_in_flight} | {t.limit_answers} |"
        )
    if "command" in names:
        noop = [float((r["command"].flow or {})["noop_seconds"]) for r in rounds]
        t = typical("command")
        lines.append(
            f"| command, no work (again, nothing changed) | auto | {spread(noop)} | "
            f"{(t.flow or {}).get('noop_requests')} | {(t.flow or {}).get('noop_budget')} | "
            "| |"
        )
    lines += ["", "### Ratios", ""]
    for name in flows:
        to_fixed = [r[name].seconds / r[fixed].seconds for r in rounds]
        from_seq = [r["seq-100"].seconds / r[name].seconds for r in rounds]
        lines.append(
            f"* `{name}`: **{spread(to_fixed)}x** the time of `{fixed}` (median of the "
            f"per-round ratios; target <= {args.target_fixed}x); **{spread(from_seq)}x** "
            f"faster than `seq-100` (target >= {args.target_seq}x)."
        )
    if "command" in names:
        over = [
            r["command"].seconds
            - r[fixed].seconds
            - float((r["command"].flow or {})["noop_seconds"])
            for r in rounds
        ]
        budgets = sorted({int((r["command"].flow or {})["noop_budget"]) for r in rounds})
        lines.append(
            f"* `command` (`ingest github`, a first run, the whole process) less `{fixed}` "
            f"less the no-work command, per round: **{spread(over)} s** (target <= 0: the "
            "whole command within the best fixed client's time plus the command's fixed "
            "cost). The no-work command spent "
            f"**{' / '.join(str(b) for b in budgets)}** requests of budget."
        )
    if len(flows) == 2:
        after, before = flows
        gain = [r[before].seconds / r[after].seconds for r in rounds]
        lines.append(
            f"* `{after}` against `{before}`: **{spread(gain)}x** faster (per-round ratios)."
        )
    lines += [
        "",
        "### Where the flow's time goes",
        "",
        "Seconds per stage as each flow run's `task_timings` hold them (the task bodies), "
        "medians of the rounds; *the rest* is the whole work less those four: Prefect's cost "
        "per task, preparing and finishing the run's staging, and the summary's artifacts "
        "(beside `commit-rows`). `commit-run`'s own figure stops before its last commit (the "
        "one that stores it). *flow call* is the `github_pulls(...)` call in the process: "
        "creating the flow run before, Prefect's exit after.",
        "",
        "| contender | whole work | load-sync-state | fetch-pulls | commit-rows | commit-run "
        "| the rest | flow call |",
        "|---|---|---|---|---|---|---|---|",
    ]
    stages = ("load-sync-state", "fetch-pulls", "commit-rows", "commit-run")
    for name in flows:

        def task(n: str, name: str = name) -> list[float]:
            return [float((r[name].flow or {})["tasks"].get(n, 0.0)) for r in rounds]

        rest = [
            r[name].seconds - sum(float((r[name].flow or {})["tasks"].get(n, 0.0)) for n in stages)
            for r in rounds
        ]
        calls = [float((r[name].flow or {})["call"]) for r in rounds]
        lines.append(
            f"| {name} | {med(col(name, 'seconds')):.3f} | "
            + " | ".join(f"{med(task(t)):.3f}" for t in stages)
            + f" | {med(rest):.3f} | {med(calls):.3f} |"
        )
    lines += [
        "",
        "### The commit path alone",
        "",
        "In the same processes, after the rounds: a first run's fetch staged (480 pull "
        "requests and the requests, pages, sync and window rows), then `storage.commit_run` "
        "(every table, one Delta commit each) and `storage.refresh_warehouse` (the views of "
        "the tables written) timed; then a full refresh of the same folder, committed into "
        "the existing tables (MERGE). Milliseconds, median (lowest-highest) of "
        f"{args.rounds} runs.",
        "",
        "| checkout | rows | first run: commit | first run: views | again: commit | again: views |",
        "|---|---|---|---|---|---|",
    ]
    for name, runs in commits.items():

        def ms(label: str, k: int, runs: list[dict[str, list[float]]] = runs) -> str:
            values = sorted(1000 * r[label][k] for r in runs)
            return f"{med(values):.0f} ({values[0]:.0f}-{values[-1]:.0f})"

        lines.append(
            f"| {name} | {int(runs[0]['first'][2])} | {ms('first', 0)} | {ms('first', 1)} | "
            f"{ms('again', 0)} | {ms('again', 1)} |"
        )
    lines += [
        "",
        "### The fixed client's search",
        "",
        f"Wall seconds per `per_page` (rows) and requests in flight (columns), median of "
        f"{len(next(iter(search.values())))} runs each, before the rounds; the best is the "
        "`fixed` contender above. Above the server's ceiling a client meets limit answers "
        "and their one-second pauses.",
        "",
        "| per_page | "
        + " | ".join(f"{c} in flight" for c in sorted({k[1] for k in search}))
        + " |",
        "|---|" + "---|" * len({k[1] for k in search}),
    ]
    for p in sorted({k[0] for k in search}):
        cells = []
        for c in sorted({k[1] for k in search}):
            v = med(search[(p, c)])
            cells.append(f"**{v:.2f}**" if (p, c) == best else f"{v:.2f}")
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"Load average (1/5/15 min): {load_start} when the run started, {load_end} when it "
        "ended, on a machine shared with other jobs.",
        "",
    ]
    return "\n".join(lines)


FIRST_BEGIN = (
    "<!-- first-contact{tag}: written by `--only first-contact`, kept by the other runs -->"
)
FIRST_END = "<!-- /first-contact{tag} -->"
FIRST_BLOCK = re.compile(
    r"<!-- first-contact(?P<tag>[^:]*): written.*?<!-- /first-contact(?P=tag) -->", re.S
)


def first_tag(args: argparse.Namespace) -> str:
    """The first-contact section's tag: its server's latency and ceiling (`` 260+44/100``);
    none for the default server (80 ms + 8 ms, 20 in flight)."""
    if (args.base_ms, args.item_ms, args.in_flight) == (80.0, 8.0, 20):
        return ""
    return f" {args.base_ms:g}+{args.item_ms:g}/{args.in_flight}"


def split_first_contact(text: str, tag: str | None = None) -> tuple[str, str]:
    """(the file without the first-contact blocks of ``tag`` (None: every one), those
    blocks with their markers, or "")."""
    found = [m for m in FIRST_BLOCK.finditer(text) if tag is None or m.group("tag") == tag]
    if not found:
        return text, ""
    kept, rest, at = [], [], 0
    for m in found:
        rest.append(text[at : m.start()].rstrip("\n"))
        kept.append(m.group(0))
        at = m.end()
    rest.append(text[at:].lstrip("\n"))
    return "\n".join(rest), "\n\n".join(kept)


def write_first_contact(path: Path, section: str, tag: str = "") -> None:
    """Add the first-contact section of ``tag`` at the end of ``path``; the sections
    measured before (of every tag) are kept as they were written, so a change's figures
    stand beside the ones before it."""
    rest = path.read_text() if path.exists() else ""
    rest = rest.strip("\n") or "# GitHub pull-request paging benchmark"
    begin, end = FIRST_BEGIN.format(tag=tag), FIRST_END.format(tag=tag)
    path.write_text(f"{rest}\n\n{begin}\n{section.strip()}\n{end}\n")


CEILINGS_OUT = Path(__file__).resolve().parent / "github_ceilings.md"
CEILING_REPOS = {f"octo/c{i:02d}": 500 for i in range(20)}


def spread(values: list[float]) -> str:
    """Median with the lowest and highest value of the rounds."""
    ordered = sorted(values)
    mid = ordered[len(ordered) // 2]
    return f"{mid:.2f} ({ordered[0]:.2f}-{ordered[-1]:.2f})"


def run_ceilings(args: argparse.Namespace) -> tuple[list[Result], list[str]]:
    """Side by side against hidden in-flight ceilings; returns rows and ratio lines.

    Per ceiling, ``--rounds`` rounds run every contender once each, one after the
    other on the same server, in an order that rotates from round to round (the
    machine's load drifts; rotating spreads it over all contenders). A row is the
    contender's median round, with the spread of its wall times; a ratio is the
    median of the per-round ratios (the adaptive run against the best fixed run of
    the same round), with their spread.
    """
    repos = CEILING_REPOS if not args.quick else {f"octo/c{i}": 200 for i in range(5)}
    names, expected = list(repos), sum(repos.values())
    results: list[Result] = []
    lines: list[str] = []
    seq: Result | None = None
    for ceiling in args.ceilings:
        scenario = f"ceiling-{ceiling}"
        with DevGitHub(
            repos=repos,
            token=TOKEN,
            latency_base_ms=args.base_ms,
            latency_per_item_ms=args.item_ms,
            max_in_flight=ceiling,
            secondary_retry_after=1.0,
        ) as server:

            def fetch(
                data_dir: Path, full: bool = False, http: Any = None, **kw: Any
            ) -> tuple[int, int]:
                settings = Settings(
                    data_dir=data_dir,
                    github={"base_url": server.url},
                    **({"http": http} if http is not None else {}),
                )
                run_id = f"r{time.time_ns()}"
                s = fetch_pulls(
                    RestConfig.of(settings),
                    names,
                    run_id=run_id,
                    token=TOKEN,
                    full_refresh=full,
                    max_wait=0,
                    limit_retries=20,
                    **kw,
                )
                assert s.complete, s.repos
                storage.commit_run(data_dir, run_id)  # as the flow does: the window is kept
                return s.pulls, s.per_page

            if seq is None:
                seq = measure(
                    server, scenario, "seq-100", lambda: (sequential(server.url, names, 100), 100)
                )
            else:
                seq = Result(**{**seq.__dict__, "scenario": scenario})
            fixed_n = sorted({max(1, ceiling // 2), ceiling, min(100, 2 * ceiling), 32})
            contenders = [f"fixed-{n}" for n in fixed_n] + ["adaptive"]
            rounds: list[dict[str, Result]] = []
            for i in range(args.rounds):
                got: dict[str, Result] = {}
                order = contenders[i % len(contenders) :] + contenders[: i % len(contenders)]
                for name in order:
                    with tempfile.TemporaryDirectory() as tmp:
                        d = Path(tmp)
                        if name == "adaptive":  # a first run, then the next night's
                            got[name] = measure(server, scenario, name, lambda d=d: fetch(d))
                            got["adaptive-warm"] = measure(
                                server, scenario, "adaptive-warm", lambda d=d: fetch(d, full=True)
                            )
                        else:
                            n = int(name.split("-")[1])
                            got[name] = measure(
                                server,
                                scenario,
                                name,
                                lambda d=d, n=n: fetch(d, http={"adaptive": False}, concurrency=n),
                            )
                rounds.append(got)
                print(
                    f"  {scenario} round {i + 1}: "
                    + ", ".join(f"{k} {v.seconds:.2f}s [{v.rate_limited}]" for k, v in got.items()),
                    flush=True,
                )
            results.append(seq)
            print(row(seq), flush=True)
            medians: dict[str, Result] = {}
            for name in [*contenders, "adaptive-warm"]:
                medians[name] = median([g[name] for g in rounds])
                results.append(medians[name])
                print(row(medians[name]), flush=True)
            best_name = min((f"fixed-{n}" for n in fixed_n), key=lambda k: medians[k].seconds)
            best = medians[best_name]
            lines.append(
                f"* ceiling {ceiling}: wall seconds over {args.rounds} rounds, median "
                "(lowest-highest): "
                + "; ".join(
                    f"`{k}` {spread([g[k].seconds for g in rounds])}"
                    for k in [*contenders, "adaptive-warm"]
                )
                + "."
            )
            for name in ("adaptive", "adaptive-warm"):
                paired = [
                    g[name].seconds / min(g[f"fixed-{n}"].seconds for n in fixed_n) for g in rounds
                ]
                limits = sum(g[name].rate_limited for g in rounds)
                sent = sum(g[name].requests for g in rounds)
                worst = max(100 * g[name].rate_limited / max(1, g[name].requests) for g in rounds)
                r = medians[name]
                lines.append(
                    f"* ceiling {ceiling}, `{name}`: **{seq.seconds / r.seconds:.1f}x** faster "
                    f"than `seq-100` ({seq.seconds:.2f} s); **{spread(paired)}x** the time of "
                    f"the best fixed client of the same round (median of the per-round ratios; "
                    f"best by median: `{best_name}`, {best.seconds:.2f} s); "
                    f"{limits} limit answers in {sent} requests over all rounds "
                    f"({100 * limits / max(1, sent):.1f} %, at most {worst:.1f} % in one round)."
                )
            for g in rounds:
                for r in g.values():
                    assert r.pulls == expected, (r.contender, r.pulls, expected)
    return results, lines


def write_ceilings(args: argparse.Namespace, results: list[Result], lines: list[str]) -> None:
    defaults = Settings()
    load = "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    text = [
        "# Hidden in-flight ceilings: the adaptive window against fixed concurrency",
        "",
        f"Measured {machine()}, with `python -m benchmarks.bench_github --only ceilings"
        f" --rounds {args.rounds}`.",
        "",
        "Server: `dev.servers.github` in its own process on loopback, latency "
        f"{args.base_ms:.0f} ms + {args.item_ms:.0f} ms per item of a page; beyond C requests "
        'in flight it answers 403 "secondary rate limit" with `Retry-After: 1` (honoured '
        "exactly: every request pauses 1 s). "
        f"{len(CEILING_REPOS)} repositories of 500 pull requests; every `ingest` contender "
        "chooses its page size from the budget (automatic `per_page`); `seq-100` is measured "
        "once (a sequential client never meets a ceiling, and its time is latency alone). "
        f"Every other contender runs once per round, {args.rounds} rounds per ceiling, in an "
        "order that rotates from round to round; `adaptive` is a first run on a fresh data "
        "folder, `adaptive-warm` the next run on that folder (`full_refresh`: every page "
        "fetched again) right after it. Rate-limit answers are counted by the server.",
        "",
        "The table gives each contender's median round.",
        "",
        HEADER,
        *[row(r) for r in results],
        "",
        "## Ratios",
        "",
        *lines,
        "",
        "Targets of the issue: at least 5x faster than `seq-100`, within 1.2x of the best "
        "fixed client, under 5 % limit answers. `adaptive` is a first run against an unknown "
        f"host: it starts at {defaults.http.initial_window} in flight, opens one more level "
        f"every {defaults.http.ramp * 1000:.0f} ms while its requests "
        "stand unrefused (`INGEST_HTTP_RAMP`) and one more per clean answer, and holds just under "
        "the ceiling once a limit answer shows it; its page size is planned for the starting "
        "window. `adaptive-warm` is every later night, starting where the last one ended "
        "(`api_windows`).",
        "",
        f"Load average (1/5/15 min) when the run ended: {load}, on a machine shared with "
        "other jobs.",
    ]
    args.out_ceilings.write_text("\n".join(text) + "\n")
    print(f"\nwritten to {args.out_ceilings.name}")


def main(argv: list[str] | None = None) -> None:
    from ingest import catalog

    catalog.load()  # every table, as the command and a run load them
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--base-ms", type=float, default=80.0, help="Latency per page, fixed part.")
    p.add_argument("--item-ms", type=float, default=8.0, help="Latency per item of a page.")
    p.add_argument("--concurrency", type=int, default=32, help="ingest's requests in flight.")
    p.add_argument("--repeats", type=int, default=3, help="Runs of ingest per scenario (median).")
    p.add_argument("--quick", action="store_true", help="Smaller scenarios (a smoke test).")
    p.add_argument("--out", type=Path, default=OUT, help="Markdown file to write.")
    p.add_argument(
        "--only",
        choices=["all", "scenarios", "ceilings", "first-contact"],
        default="all",
        help="The page-size scenarios, the hidden-ceiling comparison, the first contact "
        "(the flow's whole work beside the best fixed client), or all three.",
    )
    p.add_argument(
        "--before",
        help="First contact: also run the flow of this git revision (a temporary worktree).",
    )
    p.add_argument("--pulls", type=int, default=480, help="First contact: pull requests.")
    p.add_argument("--in-flight", type=int, default=20, help="First contact: the server's ceiling.")
    p.add_argument(
        "--target-fixed",
        type=float,
        default=1.3,
        help="First contact: the flow's target, at most this many times the best fixed client.",
    )
    p.add_argument(
        "--target-seq",
        type=float,
        default=5.0,
        help="First contact: the flow's target, at least this many times faster than seq-100.",
    )
    p.add_argument(
        "--no-command",
        action="store_true",
        help="First contact: leave out the whole `ingest github` command (and its no-work rerun).",
    )
    p.add_argument(
        "--search-repeats",
        type=int,
        default=2,
        help="First contact: runs of each per_page x in-flight pair of the search (median).",
    )
    p.add_argument(
        "--ceilings",
        type=lambda v: [int(x) for x in v.split(",")],
        default=[8, 20, 100],
        help="Hidden in-flight ceilings to compare at (comma-separated).",
    )
    p.add_argument("--out-ceilings", type=Path, default=CEILINGS_OUT)
    p.add_argument("--rounds", type=int, default=5, help="Rounds per ceiling (medians and spread).")
    args = p.parse_args(argv)
    args.argv = list(argv if argv is not None else sys.argv[1:])
    if args.only in ("all", "first-contact"):
        section = run_first_contact(args)
        print("\n" + section)
        write_first_contact(args.out, section, first_tag(args))
        print(f"\nwritten to {args.out.name}")
        if args.only == "first-contact":
            return
    if args.only in ("all", "ceilings"):
        print(HEADER)
        write_ceilings(args, *run_ceilings(args))
        if args.only == "ceilings":
            return
    scenarios = {
        "one-repo": {"octo/big": 480},
        "many-repos": {f"octo/repo{i:02d}": 200 for i in range(20)},
    }
    if args.quick:
        scenarios = {
            "one-repo": {"octo/big": 120},
            "many-repos": {f"octo/r{i}": 40 for i in range(4)},
        }
    load_start = "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    print(HEADER)
    results: list[Result] = []
    for name, repos in scenarios.items():
        results += run_scenario(name, repos, args, sweep=name == "one-repo")
    lines = ratios(results)
    print("\n".join(lines))
    load = "{:.1f} / {:.1f} / {:.1f}".format(*os.getloadavg())
    text = [
        "# GitHub pull-request paging benchmark",
        "",
        f"Measured {machine()}, with `python -m benchmarks.bench_github"
        + (" " + " ".join(argv or sys.argv[1:]) if (argv or sys.argv[1:]) else "")
        + "`.",
        "",
        "Server: `dev.servers.github` in its own process on loopback, "
        f"latency {args.base_ms:.0f} ms + {args.item_ms:.0f} ms per item of a page, "
        f"secondary limit above {GITHUB_IN_FLIGHT} requests in flight, 5,000 requests of "
        f"budget. `ingest` runs with concurrency {args.concurrency}; its figures are the "
        f"median of {args.repeats} runs (the sequential baselines are latency-bound and run "
        "once). Requests, budget, peak in flight and rate-limit answers are counted by the "
        "server; requests count the 304 answers (not the free `/rate_limit` call); budget is "
        "what GitHub charges.",
        "",
        HEADER,
        *[row(r) for r in results],
        "",
        "## Ratios",
        "",
        *lines,
        "",
        f"Load average (1/5/15 min): {load_start} when the run started, {load} when it "
        "ended, on a machine shared with "
        "other jobs; the concurrent figures are the ones it inflates most (the server answers "
        "up to 32 requests at once on the same 2 cores).",
        "",
        "## The page-size trade-off",
        "",
        "A page costs `base + per_item x per_page` seconds and one request of the budget. "
        "Small pages answer sooner and spread over more requests in flight, but cost more "
        "budget; once there are more pages than requests in flight they queue in waves and "
        "larger pages win again (the `ingest-pN` rows). When `per_page` is not given and the "
        "repositories to size are fewer than the in-flight window admits at once (one-repo), "
        "page 1 of each is probed three times at once (one pull request twice, three once): "
        'the one-item `rel="last"` is the listing\'s exact size, and the latencies on the wire, '
        "fitted by least squares, are a page's fixed time and its time per item (less the "
        "noise the two same-size answers show: `ingest.rest.sizing.fit_latency`). "
        "`ingest.rest.sizing.plan_pages` then times every size from 1 to 100 with all its "
        "pages at once, in waves of GitHub's documented 100 in flight (or the configured "
        "cap), requests past 900 a minute waiting for the next minute, plus the last look at "
        "page 1; the soonest within the budget share wins (of plans within 5 %, the fewest "
        "requests), and the window opens to the planned in-flight count. More repositories "
        "than the window admits fill it with their first pages anyway: their size is chosen "
        "before any answer (`choose_per_page`, a fixed latency prior, the budget read from "
        "the free `GET /rate_limit`), over the pull requests earlier runs stored, else "
        "`rest_expected_rows` (500). A repository keeps the page size of its previous "
        "sync, so its stored ETags stay valid and an unchanged re-run costs nothing.",
    ]
    _, kept = split_first_contact(args.out.read_text() if args.out.exists() else "")
    args.out.write_text("\n".join(text) + "\n" + (f"\n{kept}\n" if kept else ""))
    print(f"\nwritten to {args.out.name}")


if __name__ == "__main__":
    main()
