"""Limits shared by every process that calls one API host (``ingest.rest.shared``).

Two processes page different repositories of one GitHub-compatible server
(``dev.servers.github``) under one token, with one real Prefect server holding
the shared limits. The server allows 6 requests in flight (a 7th is answered
with a secondary limit) and counts what it saw; each process alone may have 6
in flight, so only a limit held for both keeps the server's count at 6. The
budget is set so that the two together want more pages than it allows above
the reserve: the server's ``remaining`` must end at or above the reserve.

The quick test runs the plain fetch (the ``fetch-pulls`` task's function) in
two child processes; ``-m limits`` adds two ``ingest github`` commands with and
without shared limits (the control shows the server's counts do catch an
overrun).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.servers.github import DevGitHub
from ingest.rest import shared
from tests.helpers import ROOT, harness_api_url, run_cli

TOKEN = "ghp_" + "SharedTokenValue0123456789abcdefABCD"  # fake, built so no scanner flags it
IN_FLIGHT = 6  # what the server allows in flight, and the cluster's shared limit
RESERVE = 15
REMAINING = 15 + 45  # 45 pages may be spent above the reserve; the two runs want 60
PULLS = 300  # per repository: 30 pages of 10

# the GitHub source's options of each run (github_source's; the command's below)
OPTIONS = {
    "per_page": 10,
    "concurrency": IN_FLIGHT,
    "rate_limit_reserve": RESERVE,
    "max_wait": 0,
    "backoff": 0.05,
}
COMMAND_OPTIONS = [
    *("--per-page", "10", "--concurrency", str(IN_FLIGHT)),
    *("--rate-limit-reserve", str(RESERVE), "--max-wait", "0"),
]

CHILD = """
import json, sys
from ingest import catalog
from ingest.rest.config import RestConfig
from ingest.rest.github import fetch_pulls
from ingest.settings import Settings
catalog.load()
s = fetch_pulls(RestConfig.of(Settings()), [sys.argv[1]], run_id=sys.argv[2], token=sys.argv[3],
                **json.loads(sys.argv[4]))
print(json.dumps({"requests": s.requests, "max_in_flight": s.max_in_flight,
                  "stopped": s.stopped, "shared_limit": s.shared_limit,
                  "round_trips": s.shared_round_trips, "pulls": s.pulls}))
"""


def test_limit_names_come_from_the_host_only() -> None:
    assert shared.limit_base("https://api.github.com") == "ingest-api-api.github.com"
    name = shared.limit_base("http://user:s3cret@127.0.0.1:8765/api/v3?token=abc")
    assert name == "ingest-api-127.0.0.1-8765"
    assert "s3cret" not in name and "abc" not in name
    assert shared.limit_base("https://x", "Team GitHub/prod") == "team-github-prod"


def test_auto_shares_on_dask_or_a_name_and_only_with_a_server() -> None:
    def api() -> str:
        return "http://127.0.0.1:4200/api"

    def none() -> None:
        return None

    assert not shared.enabled("auto", task_runner="thread", name=None, api_url=api)
    assert shared.enabled("auto", task_runner="dask", name=None, api_url=api)
    assert shared.enabled("auto", task_runner="thread", name="gh", api_url=api)
    assert not shared.enabled("auto", task_runner="dask", name=None, api_url=none)
    assert not shared.enabled("off", task_runner="dask", name="gh", api_url=api)
    with pytest.raises(ValueError, match="PREFECT_API_URL"):
        shared.enabled("on", task_runner="thread", name=None, api_url=none)


@pytest.fixture
def server() -> Iterator[DevGitHub]:
    with DevGitHub(
        repos={"octo/a": PULLS, "octo/b": PULLS},
        token=TOKEN,
        max_in_flight=IN_FLIGHT,
        secondary_retry_after=0.2,
        latency_base_ms=40.0,
        start_together=2,
    ) as gh:
        gh.set_budget(limit=1000, remaining=REMAINING, reset_in=3600)
        yield gh


def child_env(server: DevGitHub, data_dir: Path, shared_limits: str, name: str) -> dict[str, str]:
    return {
        **os.environ,
        "PREFECT_API_URL": harness_api_url(),
        "INGEST_DATA_DIR": str(data_dir),
        "INGEST_GITHUB_BASE_URL": server.url,
        "INGEST_HTTP_INITIAL_WINDOW": str(IN_FLIGHT),  # no slow start: full windows at once
        "INGEST_REST_RETRY_BASE": "0.01",
        "INGEST_SHARED_LIMITS": shared_limits,
        "INGEST_SHARED_LIMIT_NAME": name,  # one name per test: tests share a Prefect server
        "INGEST_SHARED_LIMIT_BLOCK": "3",
    }


def limit_state(name: str) -> Any:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        return client.read_global_concurrency_limit_by_name(name)


def budget_limits(name: str) -> list[Any]:
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        every = client.read_global_concurrency_limits(limit=200)
    return [x for x in every if x.name.startswith(f"{name}-budget-")]


def check_server(server: DevGitHub) -> dict[str, Any]:
    stats = server.stats()
    assert stats["held_for_start"] >= 1  # the two runs did start together
    assert stats["max_in_flight"] <= IN_FLIGHT
    assert stats.get("secondary", 0) == 0
    assert stats.get("primary_limited", 0) == 0
    assert RESERVE <= stats["remaining"]["authenticated"] <= RESERVE + 2 * 3  # blocks unspent
    return stats


@pytest.mark.flow
def test_two_processes_stay_within_one_in_flight_limit_and_one_budget(
    prefect_harness: None, server: DevGitHub, tmp_path: Path
) -> None:
    name = "test-two-processes"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, repo, f"run-{i}", TOKEN, json.dumps(OPTIONS)],
            cwd=ROOT,
            env=child_env(server, tmp_path / f"worker-{i}", "on", name),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, repo in enumerate(["octo/a", "octo/b"])
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-3000:]
        assert TOKEN not in out + err
        results.append(json.loads(out.strip().splitlines()[-1]))
    stats = check_server(server)
    # every page the server counted was asked for by one of the two, none beyond the budget
    assert sum(r["requests"] for r in results) == stats["requests"]
    assert all(r["requests"] > 1 for r in results)  # both worked, side by side
    assert any(r["stopped"] and "primary rate limit" in r["stopped"] for r in results)
    assert all(r["shared_limit"] == f"{name}-inflight" for r in results)
    # blocks, not requests: fewer calls to the Prefect server than requests to the API
    assert sum(r["round_trips"] for r in results) < stats["requests"]
    # every slot came back
    limit = limit_state(f"{name}-inflight")
    assert limit.limit == IN_FLIGHT and limit.active_slots == 0
    # one budget for the window: every request took a token of it (the two that learned
    # the window were charged), the tokens taken and not spent were given back
    (budget,) = budget_limits(name)
    assert budget.active_slots == stats["requests"] <= budget.limit


@pytest.mark.limits
@pytest.mark.skipif(not os.environ.get("LIMITS_FULL"), reason="make limits runs it")
@pytest.mark.parametrize("mode", ["on", "off"])
def test_two_ingest_github_commands_share_limits_and_without_them_overrun(
    prefect_harness: None, server: DevGitHub, tmp_path: Path, mode: str
) -> None:
    name = f"test-commands-{mode}"
    procs = [
        run_cli(
            ["github", "--repo", repo, *COMMAND_OPTIONS],
            env={
                **child_env(server, tmp_path / f"worker-{i}", mode, name),
                "GITHUB_TOKEN": TOKEN,
            },
        )
        for i, repo in enumerate(["octo/a", "octo/b"])
    ]
    outputs = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        assert p.returncode == 0, out[-3000:]
        assert TOKEN not in out
        outputs.append(out)
    if mode == "on":
        check_server(server)
        assert all(f"shared limits: {name}-inflight" in out for out in outputs)
    else:  # each process alone fills the server's limit: the counts show the overrun
        stats = server.stats()
        assert stats["max_in_flight"] > IN_FLIGHT or stats.get("secondary", 0) > 0


def run_async(coro: Any) -> Any:
    import asyncio

    return asyncio.run(coro)


@pytest.mark.flow
def test_two_holders_of_one_in_flight_limit_never_exceed_it(prefect_harness: None) -> None:
    """Two clients of one limit of 4, leasing blocks of 3: the second gets what is left
    (one slot), then slots go back whole at the end."""

    async def scenario() -> tuple[int, int, int, int]:
        async with (
            shared.open_shared("test-holders", in_flight=4, block=3) as one,
            shared.open_shared("test-holders", in_flight=4, block=3) as two,
        ):
            for _ in range(3):
                await one.slots.acquire(want=8)
            await two.slots.acquire(want=8)
            held = one.slots.held, two.slots.held
            active = limit_state("test-holders-inflight").active_slots
            refused_before = two.slots.refused
            await one.slots.release()
            await two.slots.release()
            return held[0], held[1], active, refused_before

    held_one, held_two, active, refused = run_async(scenario())
    assert (held_one, held_two) == (3, 1)
    assert active == 4 and refused >= 1  # the block of 3 was refused, one slot was not
    assert limit_state("test-holders-inflight").active_slots == 0  # all back at the end


@pytest.mark.flow
def test_budget_tokens_of_one_window_are_shared_and_a_new_window_starts_afresh(
    prefect_harness: None,
) -> None:
    async def scenario() -> tuple[int, int, list[str]]:
        async with (
            shared.open_shared("test-budget", in_flight=4, block=4) as one,
            shared.open_shared("test-budget", in_flight=4, block=4) as two,
        ):
            # both saw 10 spendable in the window resetting at 1000 (each has spent the
            # request that learned it): 10 tokens in all, the charge of the joiner included
            granted = 0
            for i in range(30):
                holder = one if i % 2 else two
                granted += await holder.budget.take(10, 1000.0)
            first = budget_limits("test-budget")
            # the next window: a limit of its own, the old one deleted
            fresh = await one.budget.take(5, 2000.0)
            names = [x.name for x in budget_limits("test-budget")]
            return granted, int(first[0].active_slots), [*names, str(fresh)]

    granted, active, names = run_async(scenario())
    assert granted == 10 - 1  # 10 above the reserve, one of them the joiner's learning request
    assert active == 10 + 1  # the creator's learning request is charged too
    assert names == ["test-budget-budget-2000", "True"]


HOLDER = """
import asyncio, sys
from ingest.rest import shared

async def main():
    async with shared.open_shared("test-killed", in_flight=4, block=3, lease_seconds=60) as s:
        for _ in range(3):
            await s.slots.acquire(want=3)
        print("held", flush=True)
        await asyncio.Event().wait()  # until killed

asyncio.run(main())
"""


@pytest.mark.limits
@pytest.mark.skipif(not os.environ.get("LIMITS_FULL"), reason="make limits runs it")
def test_slots_of_a_killed_process_come_back_when_its_lease_expires(tmp_path: Path) -> None:
    import signal
    import time

    from prefect.settings import PREFECT_API_URL, temporary_settings

    from deployments.serve import PrefectServer
    from dev.servers.s3 import free_port

    env = {"PREFECT_SERVER_SERVICES_REPOSSESSOR_LOOP_SECONDS": "1"}
    with (
        open(tmp_path / "server.log", "w") as log,
        PrefectServer(port=free_port(), home=tmp_path / "home", env=env, log=log) as server,
        temporary_settings({PREFECT_API_URL: server.api_url}),
    ):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER],
            cwd=ROOT,
            env={**os.environ, "PREFECT_API_URL": server.api_url},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == "held", line + holder.stdout.read()
        assert limit_state("test-killed-inflight").active_slots == 3
        holder.send_signal(signal.SIGKILL)  # no release, no clean-up: only the lease ends
        holder.wait()
        # the lease (60 s, the server's shortest) ends, and the repossessor (every 1 s
        # here) gives its slots back
        deadline = time.monotonic() + 120
        while limit_state("test-killed-inflight").active_slots and time.monotonic() < deadline:
            time.sleep(0.5)  # polling the server's state, not a synchronisation by time
        assert limit_state("test-killed-inflight").active_slots == 0
