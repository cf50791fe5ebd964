"""The alerts of automations.yaml on a real ``prefect server`` process.

A notification block (Prefect's Custom Webhook) posts to a webhook receiver on
loopback; the automations are created from the file as the documented command
does (``ingest alerts --output`` then ``prefect automation create --from-file``)
and again as ``ingest serve`` does (which replaces them). A nightly run of the
``nightly`` deployment whose bucket is missing fails: its child s3-ingest run
fails too, and exactly one notification arrives, naming the source and the
cause, with the link to the run. A nightly run scheduled in the past that no
worker picks up becomes Late, and the late alert follows after the (here
shortened) window. Every wait is on the receiver's queue, with a deadline.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from deployments import alerts, serve
from dev.servers.s3 import DevServer, free_port
from tests.helpers import ROOT

pytestmark = [pytest.mark.deployment, pytest.mark.server]

DEADLINE = 90.0  # seconds an alert may take to arrive before the test fails
BLOCK = "ingest-test-alerts"


class Receiver:
    """A webhook receiver on a free loopback port; every POSTed JSON body lands on a queue."""

    def __init__(self) -> None:
        self.received: queue.Queue[dict[str, Any]] = queue.Queue()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                outer.received.put(json.loads(self.rfile.read(length) or b"{}"))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Receiver:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def next(self, deadline: float = DEADLINE) -> dict[str, Any]:
        try:
            return self.received.get(timeout=deadline)
        except queue.Empty:
            pytest.fail(f"no notification within {deadline:.0f} s")


@pytest.fixture(scope="module")
def alerting(
    tmp_path_factory: pytest.TempPathFactory, _clean_environment: None
) -> Iterator[tuple[serve.PrefectServer, Receiver, Path]]:
    """A Prefect server (late runs marked after 15 s, checked every second), a receiver,
    and a Custom Webhook notification block pointing at it."""
    from prefect.blocks.notifications import CustomWebhookNotificationBlock
    from prefect.settings import PREFECT_API_URL, temporary_settings

    root = tmp_path_factory.mktemp("alerts")
    with (
        open(root / "server.log", "w") as log,
        Receiver() as receiver,
        serve.PrefectServer(
            port=free_port(),
            home=root / "prefect-home",
            env={
                "PREFECT_SERVER_SERVICES_LATE_RUNS_LOOP_SECONDS": "1",
                "PREFECT_SERVER_EVENTS_PROACTIVE_GRANULARITY": "PT1S",
            },
            log=log,
        ) as server,
        temporary_settings({PREFECT_API_URL: server.api_url}),
    ):
        CustomWebhookNotificationBlock(
            name="nightly alerts",
            url=receiver.url,
            json_data={"subject": "{{subject}}", "body": "{{body}}"},
        ).save(BLOCK, overwrite=True)
        try:
            yield server, receiver, root
        finally:
            drain_to(server)


def drain_to(server: serve.PrefectServer) -> None:
    """Send this process's queued logs and events to ``server`` while it still runs: left
    queued, they would be retried against a stopped server when the test run ends."""
    import inspect

    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker
    from prefect.utilities.asyncutils import run_coro_as_sync

    async def drain() -> None:
        for result in (APILogWorker.drain_all(), EventsWorker.drain_all()):
            if inspect.isawaitable(result):
                await result

    run_coro_as_sync(drain())


def test_failed_and_late_nightly_alert(
    alerting: tuple[serve.PrefectServer, Receiver, Path],
    s3_server: DevServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.flow_engine import run_flow
    from prefect.states import Scheduled

    from flows.nightly import nightly

    server, receiver, root = alerting
    monkeypatch.setenv("INGEST_ALERT_BLOCK", f"custom-webhook/{BLOCK}")
    monkeypatch.setenv("INGEST_ALERT_LATE_AFTER", "10")
    # The runs below belong to a deployment created without defaults: their data_dir is
    # one this worker allows (ingest.security).
    monkeypatch.setenv("INGEST_ALLOWED_ROOTS", json.dumps([str(root)]))

    # The documented command: render the file for this server, create with Prefect's CLI.
    env = {"PREFECT_API_URL": server.api_url, "PREFECT_HOME": str(root / "prefect-home")}
    rendered = root / "automations.json"
    cli = subprocess.run(
        [serve.sys.executable, "-m", "cli.main", "alerts", "--output", str(rendered)],
        cwd=ROOT,
        env={**serve.os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert cli.returncode == 0, cli.stdout + cli.stderr
    created = subprocess.run(
        [serve.prefect_exe(), "automation", "create", "--from-file", str(rendered)],
        env={**serve.os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    assert created.returncode == 0, created.stdout + created.stderr
    names = [a["name"] for a in alerts.load()]
    # What `ingest serve` does: the same automations, replacing those of the same name.
    assert serve.create_alerts(server.api_url) == names

    with get_client(sync_client=True) as client:
        on_server = [a for a in client.read_automations() if a.name in names]
        assert sorted(a.name for a in on_server) == sorted(names)  # replaced, not doubled
        late = next(a for a in on_server if a.name == "nightly-late")
        assert late.trigger.within == timedelta(seconds=10)  # type: ignore[union-attr]

        flow_id = client.create_flow_from_name("nightly")
        deployment_id = client.create_deployment(flow_id=flow_id, name="nightly")

        # A nightly whose bucket is missing: the s3-ingest child fails, so does the nightly.
        bucket = f"missing-{uuid.uuid4().hex[:8]}"
        parameters = {
            "bucket": bucket,
            "repos": [],
            "endpoint_url": s3_server.url,
            "data_dir": str(root / "data"),
        }
        failing = client.create_flow_run_from_deployment(deployment_id, parameters=parameters)
        state = run_flow(nightly, flow_run=failing, parameters=parameters, return_type="state")
        assert state.is_failed()

        failed = receiver.next()
        assert failed["subject"].startswith("ingest: nightly run")
        body = failed["body"]
        assert "Source: nightly" in body
        assert (
            f"s3-ingest failed: BucketNotFoundError: s3://{bucket}: NoSuchBucket" in body
        )  # the source, the cause
        assert f"{server.ui_url}/runs/flow-run/{failing.id}" in body  # the link to the run

        # A nightly run due a minute ago that no worker picks up: Late, then the alert.
        probe = client.create_flow_run_from_deployment(
            deployment_id,
            parameters=parameters,
            state=Scheduled(scheduled_time=datetime.now(UTC) - timedelta(minutes=1)),
        )
        late_alert = receiver.next()
        # Nothing else came between: the failing run (and its failed child) alerted once.
        assert late_alert["subject"] == "ingest: nightly late", late_alert
        assert probe.name in late_alert["body"]
        assert f"/runs/flow-run/{probe.id}" in late_alert["body"]
        assert client.read_flow_run(probe.id).state.name == "Late"  # type: ignore[union-attr]
