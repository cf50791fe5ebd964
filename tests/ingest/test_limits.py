"""Time limits and a busy warehouse, with real processes: a run past its time limit ends
TimedOut instead of hanging, and a run that could not refresh warehouse.duckdb says so in
its logs with what to do."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import ROOT, harness_api_url, run_cli
from tests.scripted_server import Answer, ScriptedServer

pytestmark = pytest.mark.flow


def _api_env() -> dict[str, str]:
    return {"PREFECT_API_URL": harness_api_url()}


def test_a_run_past_its_time_limit_ends_timed_out(prefect_harness: None, tmp_path: Path) -> None:
    """The endpoint accepts the bucket check and never answers (a read timeout of an hour
    would not fire); with INGEST_FLOW_TIMEOUT=8 the run ends TimedOut and the command
    exits with the cause, long before the endpoint would have let go."""
    with ScriptedServer() as server:
        for path in ("/bkt", "/bkt/"):
            server.script(path, Answer(200, delay=3600))
        args = ["s3", "--bucket", "bkt", "--endpoint-url", server.url]
        env = {
            **_api_env(),
            "INGEST_FLOW_TIMEOUT": "8",
            "INGEST_S3_READ_TIMEOUT": "3600",
            "INGEST_DATA_DIR": str(tmp_path / "data"),
        }
        started = time.monotonic()
        proc = run_cli(args, env=env)
        output = proc.communicate(timeout=240)[0]
        took = time.monotonic() - started
    assert proc.returncode != 0, output
    finished = [line for line in output.splitlines() if "Finished in state" in line]
    assert finished, output
    assert "TimedOut" in finished[-1] and "8.0 second" in finished[-1], finished
    assert took < 600, took  # bounded by the limit, not by the silent endpoint


HOLDER = """
import sys, duckdb
con = duckdb.connect(sys.argv[1])  # read-write, as the stock CLI opens it
print("holding", flush=True)
sys.stdin.readline()
"""


def test_a_busy_warehouse_is_reported_with_what_to_do(
    prefect_harness: None, s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    """Another process holds warehouse.duckdb read-write: the run still stores every row,
    its log says the views were not refreshed and what to do, and the next run, once the
    file is free, brings the views up to date."""
    import asyncio

    from prefect.logging.handlers import APILogHandler

    from flows.s3_ingest import s3_ingest
    from ingest import storage
    from tests.flows.test_run_logs import stored_logs

    s3.put_object(Bucket=bucket, Key="a.txt", Body=b"alpha")
    data_dir.mkdir(parents=True)
    db = data_dir / "warehouse.duckdb"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(db)],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
        state = s3_ingest(
            bucket=bucket,
            endpoint_url=s3_server.url,
            data_dir=str(data_dir),
            extract=False,
            return_state=True,
        )
        assert state.is_completed(), state.message
    finally:
        holder.communicate("\n", timeout=60)
    assert storage.query(data_dir, "SELECT key FROM s3_objects")[1] == [("a.txt",)]
    APILogHandler().flush()
    logs = asyncio.run(stored_logs(state.state_details.flow_run_id))
    busy = [m for _, _, m in logs if "warehouse.duckdb" in m and "not refreshed" in m]
    assert busy, logs
    assert any("close" in m and "next run" in m for m in busy), busy

    s3_ingest(bucket=bucket, endpoint_url=s3_server.url, data_dir=str(data_dir), extract=False)
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT key FROM s3_objects").fetchall() == [("a.txt",)]
