"""github-pulls on a real Dask cluster: a ``dask scheduler`` and two ``dask worker``
processes (``dev.servers.dask_cluster``), the GitHub-compatible dev server with
several repositories, a Prefect server holding the shared limits, and the lake
on a moto S3 bucket (no path of the flow's machine reaches a worker).

The dev server allows ``IN_FLIGHT`` requests at once (one more is answered with a
secondary limit) and a budget smaller than the repositories need above the
reserve. Each repository is a task of its own; the tasks on both workers lease
their slots and budget tokens from the limits on the Prefect server, so the
server's own counts stay within both. The first run stops at the reserve; a
second run, in a fresh rate-limit window, resumes and stores the rest. About a
minute on a loaded 2-core machine: ``make test-cluster``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.servers.dask_cluster import DaskCluster
from dev.servers.github import DevGitHub
from dev.servers.s3 import DevServer
from ingest.settings import Settings
from tests.helpers import harness_api_url, rows

pytestmark = [pytest.mark.flow, pytest.mark.cluster, pytest.mark.usefixtures("prefect_harness")]

TOKEN = "ghp_" + "DaskTokenValue0123456789abcdefABCDEF"  # fake, built so no scanner flags it
REPOS = {f"octo/r{i}": 40 + 10 * i for i in range(6)}  # 4 to 9 pages of 10 each
PAGES = sum(n // 10 for n in REPOS.values())  # 39
IN_FLIGHT = 4  # what the server allows in flight, and the cluster's shared limit
RESERVE = 10
SPENDABLE = 20  # the first window allows 20 requests above the reserve: fewer than PAGES


@pytest.fixture
def github() -> Iterator[DevGitHub]:
    with DevGitHub(
        repos=REPOS,
        token=TOKEN,
        max_in_flight=IN_FLIGHT,
        secondary_retry_after=0.2,
        latency_base_ms=60.0,  # pages take long enough for requests to overlap
    ) as gh:
        gh.set_budget(limit=1000, remaining=RESERVE + SPENDABLE, reset_in=3600)
        yield gh


def test_repositories_spread_over_two_workers_within_one_budget_and_in_flight_limit(
    github: DevGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3
    from prefect.blocks.system import Secret

    from flows.github_pulls import github_pulls

    name = f"test-gh-dask-{uuid.uuid4().hex[:6]}"  # the shared limits of this test only
    Secret(value=TOKEN).save("github-token-dask", overwrite=True)
    env = {
        "INGEST_GITHUB_BASE_URL": github.url,
        "INGEST_HTTP_INITIAL_WINDOW": str(IN_FLIGHT),  # full windows at once on each worker
        "INGEST_REST_RETRY_BASE": "0.01",
        "INGEST_SHARED_LIMIT_NAME": name,
        "INGEST_SHARED_LIMIT_BLOCK": "2",
    }
    with (
        DevServer() as lake_server,
        DaskCluster(
            tmp_path / "cluster", workers=2, env={"PREFECT_API_URL": harness_api_url()}
        ) as c,
    ):
        bucket = f"lake-{uuid.uuid4().hex[:10]}"
        s3 = boto3.client("s3", endpoint_url=lake_server.url, region_name="us-east-1")
        s3.create_bucket(Bucket=bucket)
        uri = f"s3://{bucket}/github"
        lake = Settings(
            data_dir=uri, lake={"endpoint_url": lake_server.url}, local_dir=tmp_path
        ).location
        for k, v in {**env, "INGEST_DASK_ADDRESS": c.address}.items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("INGEST_LAKE_ENDPOINT_URL", lake_server.url)

        def run() -> Any:
            return github_pulls(
                repos=list(REPOS),
                data_dir=uri,
                token_block="github-token-dask",
                task_runner="dask",
                per_page=10,
                concurrency=IN_FLIGHT,
                rate_limit_reserve=RESERVE,
                max_wait=0,
            )

        first = run()
        stats = github.stats()
        # the server's own counts: never more in flight than it allows, no limit answer,
        # and the budget never spent into the reserve
        assert stats["max_in_flight"] <= IN_FLIGHT
        assert stats.get("secondary", 0) == 0 and stats.get("primary_limited", 0) == 0
        left = stats["remaining"]["authenticated"]
        assert left >= RESERVE
        assert first.stopped and "primary rate limit" in first.stopped
        assert first.shared_limit == f"{name}-inflight"
        assert first.limit_answers == 0
        assert 0 < first.pulls < sum(REPOS.values())
        workers = rows(
            lake,
            "SELECT worker, count(*) AS n FROM task_timings "
            "WHERE task_name = 'fetch-pulls' GROUP BY ALL",
        )
        assert {r["worker"] for r in workers} == {"w1", "w2"}, workers  # both did work
        assert sum(r["n"] for r in workers) == len(REPOS)  # one task per repository
        # each worker's context of the run (its lake session, opened by its first task
        # there) was closed at the run's end
        from distributed import Client

        from ingest import context

        with Client(c.address) as dask:
            assert list(dask.run(context.open_runs).values()) == [[], []]

        # a fresh window: the second run resumes where the first stopped and completes. The
        # dev server starts it before the first one's reset time, which GitHub never does;
        # the spent window's limit on the Prefect server goes, as when its reset passes.
        from prefect.client.orchestration import get_client

        with get_client(sync_client=True) as client:
            spent = [
                x.name
                for x in client.read_global_concurrency_limits(limit=200)
                if x.name.startswith(f"{name}-budget-")
            ]
            assert len(spent) == 1  # one budget for the whole cluster
            client.delete_global_concurrency_limit_by_name(spent[0])
        github.set_budget(limit=1000, remaining=1000, reset_in=7200)
        second = run()
        stats = github.stats()
        assert second.stopped is None and second.complete and not second.errors
        assert stats["max_in_flight"] <= IN_FLIGHT
        assert stats.get("secondary", 0) == 0 and stats.get("primary_limited", 0) == 0

        stored = rows(
            lake,
            "SELECT repo, count(*) AS n, count(DISTINCT number) AS k "
            "FROM pull_requests GROUP BY ALL",
        )
        assert {r["repo"]: (r["n"], r["k"]) for r in stored} == {
            repo: (n, n) for repo, n in REPOS.items()
        }
        log = rows(lake, "SELECT repo, number, count(*) AS n FROM pull_request_log GROUP BY ALL")
        assert len(log) == sum(REPOS.values()) and all(r["n"] == 1 for r in log)  # fetched once
        assert TOKEN not in str(rows(lake, "SELECT * FROM api_requests"))
    print(
        f"first run: {first.requests} requests, {first.pulls} pull requests, stopped at "
        f"remaining {left} (reserve {RESERVE}); second: {second.requests} requests, "
        f"{second.pulls} pull requests; {PAGES} pages in all; workers {workers}"
    )
