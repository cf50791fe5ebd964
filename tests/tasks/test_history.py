"""A run's own rows at its end: staged apart from its other rows (``end_staging``) for its
end-of-run hook to commit once, and kept by the next run's recovery when the run's process
dies before that hook; warehouse.duckdb opened once a run, by its commit, and closed by
that hook."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ingest import duck, storage
from ingest.report.history import end_staging
from ingest.storage import staging
from tasks.history import record_current_run
from tests.helpers import rows

IDS = {
    "flow_run_id": "run-1",
    "flow_name": "s3-ingest",
    "deployment_id": "",
    "parent_flow_run_id": "",
}


def test_a_run_that_dies_before_its_end_of_run_hook_keeps_its_row_and_freshness(
    tmp_path: Path,
) -> None:
    record_current_run(tmp_path, IDS, seconds=2.5, items=3, size=30, target="s3://b/p", changed=3)
    # The run's own commit leaves them: its hook commits them with Prefect's figures.
    assert storage.commit_run(tmp_path, "run-1").rows == {}
    # While its process lives, another run's recovery leaves them too.
    assert storage.recover(tmp_path, current_run="run-2") == []
    assert staging.staged_tables(tmp_path, end_staging("run-1"))
    # Its process dies before the hook: the next run's recovery commits them as staged.
    gone = subprocess.Popen(["true"])
    gone.wait()
    beat = staging.run_dir(tmp_path, end_staging("run-1")) / staging.HEARTBEAT
    beat.write_text(f"{socket.gethostname()} {gone.pid}")
    assert storage.recover(tmp_path, current_run="run-2") == [end_staging("run-1")]

    [run] = rows(tmp_path, "SELECT * FROM flow_runs")
    assert (run["flow_run_id"], run["items"], run["bytes"], run["seconds"]) == ("run-1", 3, 30, 2.5)
    for table in ("source_freshness", "source_nights"):
        [night] = rows(tmp_path, f"SELECT * FROM {table}")
        assert (night["target"], night["seconds"], night["rows_changed"]) == ("s3://b/p", 2.5, 3)
    assert staging.runs(tmp_path) == []


def test_a_run_opens_its_warehouse_once_and_its_hook_closes_it(
    prefect_harness: None,
    s3: Any,
    s3_server: Any,
    bucket: str,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run's commit refreshes the views of what it wrote and leaves the file open; the
    end-of-run hook refreshes the views of the history it commits in that same opening,
    then closes it: the views read the hook's row, and the file is free when the run
    returns."""
    from prefect.client.orchestration import get_client

    from flows.s3_ingest import s3_ingest

    opened: list[str] = []
    real_connect = duck.connect

    def counting(database: str = ":memory:", **kw: Any) -> duckdb.DuckDBPyConnection:
        opened.append(database)
        return real_connect(database, **kw)

    monkeypatch.setattr(duck, "connect", counting)
    s3.put_object(Bucket=bucket, Key="a.txt", Body=b"alpha")
    state = s3_ingest(
        bucket=bucket,
        endpoint_url=s3_server.url,
        data_dir=str(data_dir),
        extract=False,
        return_state=True,
    )
    assert state.is_completed(), state.message
    db = data_dir / "warehouse.duckdb"
    assert [d for d in opened if d.endswith("warehouse.duckdb")] == [str(db)]
    run_id = str(state.state_details.flow_run_id)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
    took = (run.end_time - run.start_time).total_seconds()
    # read-only: refused in this process while a read-write connection is open
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT key FROM s3_objects").fetchall() == [("a.txt",)]
        sql = "SELECT seconds FROM flow_runs WHERE flow_run_id = ?"
        assert con.execute(sql, [run_id]).fetchall() == [(pytest.approx(took, abs=1e-6),)]
