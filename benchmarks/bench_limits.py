"""Shared limits: what one acquire costs on a Prefect server, and what a run pays.

One run starts a real ``prefect server start`` (SQLite under a temporary
``PREFECT_HOME``) and measures, in this process against it:

* ``concurrency()``: ``prefect.concurrency.asyncio.concurrency(name)``, one slot
  acquired and released (a lease, its renewal thread, the events);
* ``rate_limit()``: ``prefect.concurrency.asyncio.rate_limit(name)`` on a limit
  with slot decay;
* the client's calls that ``ingest.rest.shared`` makes: a lease of 1 slot
  taken and given back, a lease of ``--block`` slots (the cost per slot), and
  budget tokens taken without a lease (1, and a block).

Then the GitHub fetch (the ``fetch-pulls`` task's function, each run a fresh
child process and data folder) over 20 repositories of 200 pull requests
(``per_page=10``: 400 requests, 20 ms per page) on a GitHub-compatible server,
side by side, rounds interleaved:

* ``before``: a checkout of ``--before`` (default ``main``), no shared limits;
* ``after``: this tree, shared limits not configured (``auto``: off);
* ``after, shared``: this tree with ``INGEST_SHARED_LIMITS=on`` against the server.

The figure is the fetch's own seconds (its summary), median of ``--rounds``.
Run ``python -m benchmarks.bench_limits [--rounds 5] [--before REV]``; results
are printed and appended to benchmarks/limits.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bench_commands import checkout, machine
from benchmarks.bench_s3 import child_env

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "limits.md"
WORK = Path(__file__).resolve().parent / ".work"
TOKEN = "bench-token-not-a-secret"
REPOS = {f"octo/r{i:02d}": 200 for i in range(20)}

# the GitHub source's options of a run, handed to the child (github_source's keywords)
OPTIONS = "BENCH_SOURCE_OPTIONS"
OPTIONS_JSON = '{"per_page": 10, "concurrency": 32}'

CHILD = """
import json, sys
from ingest.rest.github import fetch_pulls
from ingest.settings import Settings
try:  # a revision whose sources own their tables: hand them to storage, as a run does
    from ingest import catalog
    catalog.load()
except ImportError:
    pass
try:
    from ingest.rest.config import RestConfig
    config = RestConfig.of(Settings())
except ImportError:  # a revision from before RestConfig: the fetch took the Settings
    config = Settings()
# the source's options (this revision's; an older one read them from INGEST_GITHUB_*)
opts = json.loads(sys.argv[3]) if len(sys.argv) > 3 else {}
s = fetch_pulls(config, sys.argv[1].split(","), run_id="bench", token=sys.argv[2], **opts)
print(json.dumps({"seconds": s.seconds, "requests": s.requests}))
"""


async def per_call(n: int, call: Callable[[], Awaitable[Any]]) -> float:
    """Milliseconds per call, ``n`` calls one after another."""
    await call()  # warm: connection, first query plans
    t0 = time.perf_counter()
    for _ in range(n):
        await call()
    return (time.perf_counter() - t0) / n * 1000


async def acquire_costs(api_url: str, n: int, block: int) -> list[tuple[str, float, float]]:
    """(what, ms per call, ms per slot)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.concurrency.asyncio import concurrency, rate_limit
    from prefect.settings import PREFECT_API_URL, temporary_settings

    rows: list[tuple[str, float, float]] = []
    with temporary_settings({PREFECT_API_URL: api_url}):
        async with get_client() as c:
            await c.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name="bench-inflight", limit=1000)
            )
            await c.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(
                    name="bench-rate", limit=100_000, slot_decay_per_second=1000.0
                )
            )
            await c.create_global_concurrency_limit(
                GlobalConcurrencyLimitCreate(name="bench-budget", limit=10_000_000)
            )

            async def with_concurrency() -> None:
                async with concurrency("bench-inflight", occupy=1, strict=True):
                    pass

            async def with_rate_limit() -> None:
                await rate_limit("bench-rate", strict=True)

            def lease(slots: int) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    r = await c.increment_concurrency_slots_with_lease(
                        ["bench-inflight"], slots, "concurrency", 60.0
                    )
                    await c.release_concurrency_slots_with_lease(r.json()["lease_id"])

                return call

            def tokens(slots: int) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    await c.increment_concurrency_slots(["bench-budget"], slots, "concurrency")

                return call

            ms = await per_call(n, with_concurrency)
            rows.append(("concurrency(), 1 slot: acquire + release", ms, ms))
            ms = await per_call(n, with_rate_limit)
            rows.append(("rate_limit(), 1 slot", ms, ms))
            ms = await per_call(n, lease(1))
            rows.append(("client: lease 1 slot + give it back", ms, ms))
            ms = await per_call(n, lease(block))
            rows.append((f"client: lease {block} slots + give them back", ms, ms / block))
            ms = await per_call(n, tokens(1))
            rows.append(("client: 1 budget token (no lease)", ms, ms))
            ms = await per_call(n, tokens(block))
            rows.append((f"client: {block} budget tokens (no lease)", ms, ms / block))
    return rows


def fetch_once(cwd: Path, env: dict[str, str], data_dir: Path) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, ",".join(REPOS), TOKEN]
        + ([env[OPTIONS]] if OPTIONS in env else []),
        cwd=cwd,
        env={**env, "INGEST_DATA_DIR": str(data_dir)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    result: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def run(a: argparse.Namespace, scratch: Path) -> str:
    from deployments.serve import PrefectServer
    from dev.servers.github import DevGitHub
    from dev.servers.s3 import free_port

    with ExitStack() as stack:
        log = stack.enter_context(open(scratch / "prefect-server.log", "w"))
        server = stack.enter_context(
            PrefectServer(port=free_port(), home=scratch / "server-home", log=log)
        )
        costs = asyncio.run(acquire_costs(server.api_url, a.calls, a.block))
        gh = stack.enter_context(
            DevGitHub(repos=REPOS, token=TOKEN, latency_base_ms=20.0, max_in_flight=100)
        )
        before = stack.enter_context(checkout(a.before))
        base = {**child_env(scratch), "INGEST_GITHUB_BASE_URL": gh.url, OPTIONS: OPTIONS_JSON}
        old = {**base, "INGEST_GITHUB_PER_PAGE": "10", "INGEST_GITHUB_CONCURRENCY": "32"}
        del old[OPTIONS]  # the revision before read its source's options from settings
        contenders: dict[str, tuple[Path, dict[str, str]]] = {
            f"before ({a.before})": (before, old),
            "after, not shared": (ROOT, base),
            "after, shared": (
                ROOT,
                {**base, "INGEST_SHARED_LIMITS": "on", "PREFECT_API_URL": server.api_url},
            ),
        }
        seconds: dict[str, list[float]] = {name: [] for name in contenders}
        for r in range(a.rounds):
            for name, (cwd, env) in contenders.items():
                gh.set_budget(limit=5000, remaining=5000, reset_in=3600)
                out = fetch_once(cwd, env, scratch / f"data-{r}-{len(seconds[name])}-{id(env)}")
                assert out["requests"] >= 400, out
                seconds[name].append(out["seconds"])
                print(f"round {r + 1}: {name}: {out['seconds']:.3f} s", flush=True)
    return report(a, costs, seconds)


def report(
    a: argparse.Namespace, costs: list[tuple[str, float, float]], seconds: dict[str, list[float]]
) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## {stamp}",
        "",
        f"Machine: {machine()}.",
        "",
        f"Cost of one call against a running `prefect server start` (SQLite), {a.calls} calls "
        "one after another:",
        "",
        "| what | ms per call | ms per slot |",
        "|---|---:|---:|",
        *[f"| {what} | {ms:.1f} | {slot:.2f} |" for what, ms, slot in costs],
        "",
        f"GitHub fetch, 20 repositories x 200 pull requests, per_page 10 (400 requests), "
        f"20 ms per page, concurrency 32; seconds of the fetch, median of {a.rounds} rounds "
        "(rounds interleaved):",
        "",
        "| contender | median s | min s | vs before |",
        "|---|---:|---:|---:|",
    ]
    first = statistics.median(next(iter(seconds.values())))
    for name, values in seconds.items():
        med = statistics.median(values)
        lines.append(f"| {name} | {med:.3f} | {min(values):.3f} | {med / first:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--before", default="main", help="Revision to compare with.")
    p.add_argument("--calls", type=int, default=50, help="Calls per acquire measurement.")
    p.add_argument("--block", type=int, default=8, help="Slots per lease (as the setting).")
    a = p.parse_args(argv)
    WORK.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="limits-", dir=WORK) as tmp:
        text = run(a, Path(tmp))
    print(text)
    with OUT.open("a", encoding="utf-8") as f:
        if f.tell() == 0:
            f.write("# Shared limits: cost per acquire, and what a run pays\n\n")
            f.write("`python -m benchmarks.bench_limits` (see its docstring).\n\n")
        f.write(text + "\n")


if __name__ == "__main__":
    main()
