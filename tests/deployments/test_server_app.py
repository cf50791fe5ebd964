"""The Prefect server the project starts answers SQLite's "database is locked" 503s with a
short ``Retry-After`` (uncounted by the client while young), and Prefect's client asks
again that soon instead of after 2 s.

The lock is real: the test holds a write transaction on the server's SQLite database,
as another writer (a worker's heartbeat, the task-run recorder) does, and a task run
created meanwhile meets it through the whole stack (uvicorn, Prefect's app and its
exception handler, ``deployments.server_app``)."""

from __future__ import annotations

import base64
import logging
import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from deployments import server_app
from deployments.local_api import TemporaryServer


def test_waits_stay_short_and_uncounted_while_503s_are_young_then_count_again() -> None:
    now = [100.0]
    wait = server_app.RetryWait(clock=lambda: now[0])
    base = server_app.BASE_SECONDS
    assert wait() == (base, True)  # a first 503
    now[0] += 0.45
    assert wait() == (base, True)  # met again on the retry, as under load: still short
    # One client alone on a lock that lasts, back when told (plus 10 % of jitter): the
    # waits grow, up to the cap; its retries go uncounted for UNCOUNTED_SECONDS, then
    # count, so it gives up (after 5 counted retries) later than Prefect's own 62 s.
    told = []
    while sum(not uncounted for _w, uncounted in told) < 6:
        told.append(wait())
        now[0] += told[-1][0] * 1.1
    waits = [w for w, _u in told]
    assert waits == sorted(waits) and waits[-1] == server_app.CAP_SECONDS
    first_counted = next(i for i, (_w, uncounted) in enumerate(told) if not uncounted)
    assert all(not uncounted for _w, uncounted in told[first_counted:])
    assert 62 < now[0] - 100.0 < 150, now[0] - 100.0
    # once quiet for longer than the last client was told to wait, a 503 is a new spell
    now[0] += server_app.CAP_SECONDS * (1 + server_app.JITTER) + server_app.QUIET_SECONDS + 1
    assert wait() == (base, True)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TemporaryServer]:
    """Our app under uvicorn on loopback (the command's own server), SQLite in a folder
    of the test's own; the server's log names each request it answered 503."""
    env = {"PREFECT_HOME": str(tmp_path), "PREFECT_API_LOG_RETRYABLE_ERRORS": "true"}
    with TemporaryServer(env=env) as srv:
        yield srv


def _auth(srv: TemporaryServer) -> dict[str, str]:
    token = base64.b64encode(srv.auth_string.encode()).decode()
    return {"Authorization": f"Basic {token}"}


@pytest.mark.server
def test_a_locked_write_gets_a_short_retry_after_and_the_client_uses_it(
    server: TemporaryServer, tmp_path: Path
) -> None:
    api = httpx.Client(base_url=server.api_url, headers=_auth(server), timeout=60)
    flow = api.post("/flows/", json={"name": "locked"}).json()
    run = api.post("/flow_runs/", json={"flow_id": flow["id"]}).json()
    task_run = {"flow_run_id": run["id"], "task_key": "k", "dynamic_key": "0", "name": "t"}

    other_writer = sqlite3.connect(tmp_path / "prefect.db", isolation_level=None, timeout=60)

    # Prefect's own client meets the lock: answered 503 (the server's first), it asks again
    # after the server's short wait, and succeeds once the lock is gone (released as soon
    # as the server's log names the 503).
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    done: dict[str, Any] = {}
    settings = {PREFECT_API_URL: server.api_url, PREFECT_API_AUTH_STRING: server.auth_string}
    with temporary_settings(settings), get_client(sync_client=True) as client:
        task = _task()

        def create() -> None:
            done["run"] = client.create_task_run(task=task, flow_run_id=run["id"], dynamic_key="1")

        said = _ClientLog()  # after Prefect's logging set-up, which sets the client's level
        worker = threading.Thread(target=create)
        other_writer.execute("BEGIN IMMEDIATE")  # holds SQLite's write lock, as another writer
        try:
            worker.start()
            deadline = time.monotonic() + 60
            while b"retryable exception" not in server._output():
                assert time.monotonic() < deadline, "the server never answered the client 503"
                time.sleep(0.05)  # polling the server's log for its 503, with a deadline
        finally:
            other_writer.execute("ROLLBACK")
        worker.join(60)
    said.close()
    assert not worker.is_alive()
    assert done["run"].flow_run_id is not None  # created, after the retry
    waits = [
        float(m.group(1))
        for line in said.lines
        if (m := re.search(r"code 503\. Another attempt will be made in ([0-9.]+)s", line))
    ]
    assert waits, said.lines
    # the server's 0.25 s plus the client's jitter (at most +20 %), not the client's own
    # 2 s (+-20 %) of a 503 without the header
    base = server_app.BASE_SECONDS
    assert base <= waits[0] <= base * (1 + server_app.JITTER) + 1e-9, waits

    # The same through a plain HTTP request: the 503 carries the header; other answers
    # get none (on a new connection: uvicorn closes the one whose request raised).
    other_writer.execute("BEGIN IMMEDIATE")
    try:
        answered = api.post("/task_runs/", json=task_run)
    finally:
        other_writer.execute("ROLLBACK")
        other_writer.close()
    assert answered.status_code == 503, answered.text
    assert 0 < float(answered.headers["Retry-After"]) <= server_app.CAP_SECONDS
    assert answered.headers["Prefect-Maintenance"] == "true"  # a young spell: uncounted
    assert "retry-after" not in httpx.get(f"{server.api_url}/health").headers


class _ClientLog(logging.Handler):
    """The debug lines of Prefect's HTTP client (``prefect.client``, which does not
    propagate to the root logger), among them each retry and its wait."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.logger = logging.getLogger("prefect.client")
        self.level_was = self.logger.level
        self.logger.setLevel(logging.DEBUG)
        self.logger.addHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def close(self) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.level_was)
        super().close()


def _task() -> Any:
    from prefect import task

    @task(name="locked-write")
    def locked_write() -> None:
        return None

    return locked_write
