"""Faults of the orchestration around a run: the Prefect server stopped mid-run and
started again, and two nightly runs overlapping (a slow night running into the
next schedule)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from deployments import serve
from dev.servers.github import DevGitHub
from dev.servers.s3 import DevServer, free_port
from tests.chaos.conftest import s3_client
from tests.chaos.support import Trial, check_s3, record, rng, timed, trials
from tests.helpers import ROOT, put_many, rows

TOKEN = "ghp_" + "NightTokenValue0123456789abcdefABCDEF"  # fake, built so no scanner flags it


def texts(bucket: str, n: int) -> dict[str, bytes]:
    return {f"d/{i:03d}.txt": f"{bucket} {i} ".encode() * (200 + i) for i in range(n)}


def child(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, *args],
            cwd=ROOT,
            env={**os.environ, **env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def flow_run_state(api_url: str, log: Path) -> str:
    """The state the server holds for the run whose id the run's log names."""
    import re

    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    found = re.search(r"/runs/flow-run/([0-9a-f-]{36})", log.read_text(errors="replace"))
    if not found:
        return "no run id in the log"
    with temporary_settings({PREFECT_API_URL: api_url}), get_client(sync_client=True) as c:
        run = c.read_flow_run(uuid.UUID(found.group(1)))
        return run.state.type.value if run.state else "none"


@pytest.mark.timeout(1800)
def test_prefect_server_stopped_mid_run_and_started_again(tmp_path: Path) -> None:
    """``ingest s3`` against a real ``prefect server start``; at a seeded moment the
    server is killed, and started again on the same port and database a few seconds
    later. The run's data must be whole; its final state on the server is recorded."""
    fault = "Prefect server stopped mid-run, restarted"
    n = trials(3, 0)
    if not n:
        pytest.skip("runs under make chaos (two server starts per trial)")
    r = rng(fault)
    port = free_port()
    home = tmp_path / "prefect-home"
    problems = []
    with DevServer(latency_ms=40) as slow:
        client = s3_client(slow.url)
        for i in range(n):
            bucket = f"srv-{uuid.uuid4().hex[:8]}"
            client.create_bucket(Bucket=bucket)
            put_many(client, bucket, texts(bucket, 80))
            data_dir = tmp_path / f"t{i}"
            log = tmp_path / f"t{i}.log"
            delay, outage = r.uniform(1.0, 6.0), r.uniform(1.0, 8.0)
            server_log = (tmp_path / f"server{i}.log").open("w")
            server = serve.PrefectServer(port=port, home=home, log=server_log).__enter__()
            env = {"PREFECT_API_URL": server.api_url, "INGEST_S3_BATCH_SIZE": "5"}
            args = ["-m", "cli.main", "s3", "--bucket", bucket, "--endpoint-url", slow.url]
            proc = child([*args, "--data-dir", str(data_dir), "--concurrency", "2"], env, log)
            while "Beginning flow run" not in log.read_text(errors="replace"):
                assert proc.poll() is None, log.read_text()[-3000:]
                time.sleep(0.05)  # polling for the flow's start
            time.sleep(delay)  # the fault's random point
            assert server.proc is not None
            os.killpg(server.proc.pid, signal.SIGKILL)
            server.proc.wait()
            time.sleep(outage)  # how long the server stays down (the trial's second point)
            server = serve.PrefectServer(port=port, home=home, log=server_log).__enter__()
            try:
                code = proc.wait(600)
                state = flow_run_state(server.api_url, log)
                with timed() as took:
                    again = child([*args, "--data-dir", str(data_dir)], env, tmp_path / f"a{i}.log")
                    again_code = again.wait(600)
            finally:
                server.__exit__()
                server_log.close()
            exit_line = log.read_text(errors="replace").strip().splitlines()[-1][:160]
            check = check_s3(client, bucket, data_dir, documents=True)
            ended = again_code == 0
            trial = record(
                Trial(
                    fault,
                    point=f"killed {delay:.1f} s into the run, down {outage:.1f} s",
                    ended_as_expected=ended,
                    lost=check.lost,
                    duplicates=check.duplicates,
                    partial=check.partial,
                    recover_seconds=took[0],
                    note=f"exit {code}, state on the server: {state}; {exit_line}",
                )
            )
            if not (ended and check.clean):
                problems.append((trial, check.detail))
    assert not problems, problems


SLOT_WAIT = 2  # seconds a queued run waits before it asks for the deployment's slot again


def _states(client: Any, flow_run_id: uuid.UUID) -> list[str]:
    """The run's state names in order, repeats folded (``Scheduled``, ``AwaitingConcurrencySlot``,
    ``Pending``, ``Running``, ``Completed``)."""
    names: list[str] = []
    for st in sorted(client.read_flow_run_states(flow_run_id), key=lambda x: x.timestamp):
        if not names or names[-1] != st.name:
            names.append(st.name or st.type.value)
    return names


def _wait_final(client: Any, ids: list[uuid.UUID], deadline: float = 600) -> list[Any]:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        runs = [client.read_flow_run(i) for i in ids]
        if all(r.state and r.state.is_final() for r in runs):
            return runs
        time.sleep(0.5)  # polling the API for final states, with a deadline
    raise AssertionError(f"not final after {deadline} s: {[r.state for r in runs]}")


def _wait_running(client: Any, flow_run_id: uuid.UUID, deadline: float = 300) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        run = client.read_flow_run(flow_run_id)
        if run.state and (run.state.is_running() or run.state.is_final()):
            return run
        time.sleep(0.1)  # polling the API for the run's start, with a deadline
    raise AssertionError(f"flow run {flow_run_id} did not start: {run.state}")


@pytest.mark.timeout(2400)
def test_two_nightly_runs_overlapping(tmp_path: Path) -> None:
    """A slow night running into the next schedule, through the nightly deployment of
    prefect.yaml: a real ``prefect server``, ``prefect deploy --all``, a process worker
    (what ``ingest serve`` starts). The first night is triggered; once it runs, the next
    night is scheduled a seeded few seconds later (as the scheduler inserts the cron's
    runs), on the same bucket, repository and data folder.

    The deployment's concurrency limit (1, ``ENQUEUE``) must hold the second night back
    until the first has ended (its state history shows ``AwaitingConcurrencySlot``); it
    then runs and finds nothing left to do. Each object is downloaded once over both
    nights, every pull request stored once, nothing is torn; the second run's final
    state is recorded."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import DeploymentUpdate
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Scheduled

    from deployments import project

    fault = "two nightly runs overlapping"
    n = trials(3, 0)
    if not n:
        pytest.skip("runs under make chaos (a Prefect server, a deploy and a worker)")
    r = rng(fault)
    problems = []
    home, logs = tmp_path / "prefect-home", tmp_path / "logs"
    logs.mkdir()
    with (
        open(logs / "server.log", "w") as server_log,
        open(logs / "worker.log", "w") as worker_log,
        open(logs / "deploy.log", "w") as deploy_log,
        serve.PrefectServer(
            port=free_port(),
            home=home,
            env={"PREFECT_SERVER_DEPLOYMENTS_CONCURRENCY_SLOT_WAIT_SECONDS": str(SLOT_WAIT)},
            log=server_log,
        ) as server,
        DevServer(latency_ms=30) as slow,
        DevGitHub(repos={"octo/night": 200}, token=TOKEN, latency_base_ms=20) as gh,
    ):
        env = {
            **os.environ,
            **serve.SERVER_ENV,
            "PREFECT_API_URL": server.api_url,
            "PREFECT_HOME": str(home),
            "PREFECT_WORKER_QUERY_SECONDS": "1",
            "GITHUB_TOKEN": TOKEN,
            "INGEST_S3_BATCH_SIZE": "5",
            # The defaults the test sets on the server reach only what the worker allows.
            "INGEST_ALLOWED_HOSTS": json.dumps([gh.url]),
            "INGEST_ALLOWED_ROOTS": json.dumps([str(tmp_path)]),
        }
        serve.ensure_work_pools(server.api_url, project.work_pools(project.load()))
        serve.deploy_all(env, log=deploy_log)
        with (
            serve.Worker("ingest", env, log=worker_log),
            temporary_settings({PREFECT_API_URL: server.api_url}),
            get_client(sync_client=True) as api,
        ):
            deployment = api.read_deployment_by_name("nightly/nightly")
            limit = deployment.global_concurrency_limit
            assert limit is not None and limit.limit == 1, limit
            client = s3_client(slow.url)
            for i in range(n):
                bucket = f"night-{uuid.uuid4().hex[:8]}"
                client.create_bucket(Bucket=bucket)
                put_many(client, bucket, texts(bucket, 60))
                data_dir = tmp_path / f"t{i}"
                # The nightly's defaults point at this trial's bucket and folder, as a user
                # edits them in the UI; both nights run with the deployment's defaults.
                params = {
                    **deployment.parameters,
                    "bucket": bucket,
                    "prefix": "",
                    "repos": ["octo/night"],
                    "endpoint_url": slow.url,
                    "github_base_url": gh.url,
                    "github_per_page": 10,
                    "data_dir": str(data_dir),
                    "s3_concurrency": 4,
                }
                api.update_deployment(deployment.id, DeploymentUpdate(parameters=params))
                first = api.create_flow_run_from_deployment(deployment.id)
                _wait_running(api, first.id)
                delay = r.uniform(0.5, 4.0)  # the fault's random point: the next schedule
                at = datetime.now(UTC) + timedelta(seconds=delay)
                second = api.create_flow_run_from_deployment(
                    deployment.id, state=Scheduled(scheduled_time=at)
                )
                one, two = _wait_final(api, [first.id, second.id])
                states = _states(api, second.id)
                overlapped = one.end_time is not None and at < one.end_time
                waited = "AwaitingConcurrencySlot" in states
                after = (
                    two.start_time is not None
                    and one.end_time is not None
                    and two.start_time >= one.end_time
                )
                check = check_s3(client, bucket, data_dir, documents=True)
                twice = rows(
                    data_dir,
                    "SELECT count(*) - count(DISTINCT key) n FROM s3_object_log "
                    "WHERE status = 'downloaded'",
                )[0]["n"]
                _, pulls = _pulls(data_dir)
                dup_pulls = len(pulls) - len(set(pulls))
                lost_pulls = 200 - len(set(pulls))
                ended = (
                    one.state.is_completed()
                    and two.state.is_completed()
                    and overlapped
                    and waited
                    and after
                    and twice == 0
                )
                took = two.total_run_time.total_seconds()
                trial = record(
                    Trial(
                        fault,
                        point=f"next night scheduled {delay:.1f} s after the first began running",
                        ended_as_expected=ended,
                        lost=check.lost + lost_pulls,
                        duplicates=check.duplicates + dup_pulls + twice,
                        partial=check.partial,
                        recover_seconds=took,
                        note=f"first {one.state.name}; second {' > '.join(states)}; "
                        f"{twice} objects downloaded by both nights; second started "
                        f"{(two.start_time - one.end_time).total_seconds():.1f} s after "
                        "the first ended"
                        if two.start_time and one.end_time
                        else f"second {' > '.join(states)}",
                    )
                )
                if not (ended and check.clean and not dup_pulls and not lost_pulls):
                    problems.append(
                        (
                            trial,
                            check.detail,
                            worker_log.name,
                            (logs / "worker.log").read_text()[-2000:],
                        )
                    )
    assert not problems, problems


def _pulls(data_dir: Path) -> tuple[list[str], list[Any]]:
    from ingest import storage

    columns, values = storage.query(data_dir, "SELECT number FROM pull_requests")
    return columns, [v[0] for v in values]
