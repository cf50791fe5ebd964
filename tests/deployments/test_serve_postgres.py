"""``ingest serve --database-url``: the Prefect server on a real PostgreSQL.

The test starts its own PostgreSQL (Debian's ``postgresql`` package, which
``.ci/run`` installs) in a temporary folder on a free port, creates a database
owned by a role without superuser rights (the recipe of docs/deployments-and-ui.md), runs
``ingest serve --database-url postgresql+asyncpg://...`` as a user would,
triggers a deployment and finds its flow run in PostgreSQL's ``flow_run``
table. The password never shows in what ``ingest serve`` prints.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from deployments import auth
from dev.servers import postgres
from dev.servers.s3 import free_port
from tests.deployments.test_deployments import run_s3_deployment
from tests.helpers import put_many, rows, run_cli

pytestmark = [pytest.mark.deployment, pytest.mark.server]
needs_postgres = pytest.mark.skipif(
    postgres.bin_dir() is None,
    reason="needs Debian's postgresql package (/usr/lib/postgresql/*/bin; .ci/run installs it)",
)


class Output:
    """The lines a child process prints, read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append("")  # end of output
            self.changed.notify_all()

    def wait_for(self, text: str, deadline: float) -> None:
        end = time.monotonic() + deadline
        with self.changed:
            while not any(text in line for line in self.lines):
                if "" in self.lines:
                    raise AssertionError(f"exited before {text!r}:\n{self.text}")
                left = end - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {text!r} after {deadline} s:\n{self.text}")
                self.changed.wait(left)

    @property
    def text(self) -> str:
        return "".join(self.lines)

    def stop(self, proc: subprocess.Popen[str]) -> None:
        """Ctrl-C to the process (killed if it has not ended a minute later), then the
        rest of what it printed."""
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.thread.join(10)


@needs_postgres
def test_serve_keeps_its_runs_in_postgresql(
    s3: Any, bucket: str, tmp_path: Path, _clean_environment: None
) -> None:
    keys = {f"docs/{i}.txt": f"document {i}".encode() for i in range(3)}
    put_many(s3, bucket, keys)
    home, data_dir = tmp_path / "home", tmp_path / "data"
    port = free_port()
    with postgres.PostgresServer() as pg:
        url = pg.create_database("prefect")
        env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
        env.update(
            PREFECT_HOME=str(home),
            INGEST_DATA_DIR=str(data_dir),
            PREFECT_WORKER_QUERY_SECONDS="1",
        )
        proc = run_cli(["serve", "--port", str(port), "--database-url", url], env=env)
        out = Output(proc)
        try:
            out.wait_for("Worker started", deadline=240)
            api_url = f"http://127.0.0.1:{port}/api"
            secret = (home / auth.FILE_NAME).read_text().strip()  # serve's API auth
            run = run_s3_deployment(api_url, secret, bucket, s3.meta.endpoint_url)
            assert run.state.is_completed(), (run.state, out.text[-3000:])
            stored = pg.psql(
                "SELECT f.id, f.state_type, d.name FROM flow_run f "
                f"JOIN deployment d ON d.id = f.deployment_id WHERE f.id = '{run.id}'",
                database="prefect",
            )
            assert stored == [[str(run.id), "COMPLETED", "s3-ingest"]]
            # Task runs reach the database as events, which the server's recorder writes
            # in batches after the run's own state: asked until they are there.
            deadline = time.monotonic() + 60
            while True:
                tasks = pg.psql(
                    f"SELECT count(*) FROM task_run WHERE flow_run_id = '{run.id}'", "prefect"
                )
                if int(tasks[0][0]) > 0 or time.monotonic() > deadline:
                    break
                time.sleep(0.5)  # polling the database for a condition, with a deadline
            assert int(tasks[0][0]) > 0
        finally:
            out.stop(proc)
    assert proc.returncode == 0, out.text[-3000:]
    assert not (home / "prefect.db").exists()  # no SQLite database beside it
    [n] = rows(data_dir, "SELECT count(*) AS n FROM s3_objects")
    assert n["n"] == len(keys)
    # The server's address is shown, its password never.
    assert "(PostgreSQL postgresql+asyncpg://prefect:***@127.0.0.1:" in out.text
    assert pg.password not in out.text


def test_serve_refuses_a_database_it_cannot_use(tmp_path: Path, _clean_environment: None) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_HOME"] = str(tmp_path)
    secret = "s3cr3t-pass-123"
    proc = run_cli(["serve", "--database-url", f"mysql://u:{secret}@db/prefect"], env=env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "database 'mysql' is not one the Prefect server uses" in out
    assert secret not in out
