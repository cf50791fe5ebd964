"""A flow run's process stops on SIGTERM as a command stops on Ctrl-C.

Prefect's process worker starts a deployment's run as ``python -m prefect.engine`` and
cancels it (Run > Cancel in the UI) with SIGTERM to that process. Here a nightly run
(its S3 child only) is started exactly so, on the session's Prefect server, against an
S3 server that answers each request after 150 ms; SIGTERM goes to the process once the
first batch is done. Prefect's own handler raises in the main thread only, where the
nightly waits for its child: the child's thread and its S3 lanes went on until their
queue was empty, so the process fetched every object before it could end. Now the
requests not yet sent end unsent: the server counts fewer GETs than objects, none
after the process ended, and the server records the run as ended, not running.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import boto3
import pytest

from dev.servers.s3 import DevServer
from tests.helpers import ROOT, body_for, put_many

pytestmark = pytest.mark.flow

N = 600


def gets(server: DevServer) -> int:
    with urllib.request.urlopen(f"{server.url}/_dev/stats", timeout=10) as answer:
        return int(json.load(answer).get("GET object", 0))


@pytest.mark.usefixtures("prefect_harness")
def test_sigterm_stops_a_nightly_run_started_as_a_worker_starts_it(tmp_path: Path) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import get_current_settings

    from flows.nightly import nightly

    with DevServer(latency_ms=150) as slow:
        client = boto3.client("s3", endpoint_url=slow.url, region_name="us-east-1")
        client.create_bucket(Bucket="term-docs")
        put_many(client, "term-docs", {f"d/{i:04}.txt": body_for(f"t/{i}") for i in range(N)})
        parameters = {
            "bucket": "term-docs",
            "prefix": "d/",
            "endpoint_url": slow.url,
            "s3_concurrency": 8,
            "repos": [],
        }
        with get_client(sync_client=True) as api:
            flow_id = api.create_flow_from_name(nightly.name)
            deployment_id = api.create_deployment(
                flow_id=flow_id,
                name=f"sigterm-{os.urandom(4).hex()}",
                entrypoint="flows/nightly.py:nightly",
                path=str(ROOT),
                parameters=parameters,
            )
            run = api.create_flow_run_from_deployment(deployment_id)
        env = {
            **os.environ,
            "PREFECT_API_URL": str(get_current_settings().api.url),
            "PREFECT__FLOW_RUN_ID": str(run.id),
            "INGEST_DATA_DIR": str(tmp_path / "data"),
            "INGEST_S3_BATCH_SIZE": "100",
        }
        proc = subprocess.Popen(
            [sys.executable, "-m", "prefect.engine"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert proc.stdout is not None
        seen: list[str] = []
        for line in proc.stdout:  # the first batch's end: the run is under way
            seen.append(line)
            if "download-batch" in line and "Finished in state Completed" in line:
                break
        else:
            raise AssertionError("".join(seen))
        os.kill(proc.pid, signal.SIGTERM)
        out = "".join(seen) + proc.communicate(timeout=120)[0]
        at_exit = gets(slow)
        assert at_exit < N, out  # the lanes stopped: not every object was fetched
        assert gets(slow) == at_exit  # and nothing is fetched once the process is gone
        with get_client(sync_client=True) as api:
            state = api.read_flow_run(run.id).state
    assert proc.returncode != 0, out
    assert state is not None and state.is_final() and not state.is_completed(), state
