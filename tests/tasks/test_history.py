"""A run's own rows at its end: staged apart from its other rows (``end_staging``) for its
end-of-run hook to commit once, and kept by the next run's recovery when the run's process
dies before that hook."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

from ingest import storage
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
