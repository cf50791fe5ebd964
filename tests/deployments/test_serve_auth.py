"""``ingest serve`` with Prefect's API auth, on a real server on loopback.

``ingest serve`` runs as a user starts it (a child process, its own Prefect home):
it generates the auth string, keeps it in a file only its user can read, starts the
server with it and gives it to its worker. A request without the string (or with a
wrong one) gets 401; a deployment run triggered through an authenticated client is
picked up by the worker and completes; an ``ingest s3`` command on the same machine,
given nothing but the Prefect home, finds the running serve and its auth string and
records its run there. The string itself never shows in what serve prints.
"""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest

from deployments import auth, local_api
from dev.servers.s3 import free_port
from tests.deployments.test_deployments import RUN_DEADLINE, run_s3_deployment
from tests.deployments.test_serve_postgres import Output
from tests.helpers import put_many, rows, run_cli

pytestmark = [pytest.mark.deployment, pytest.mark.server]


def basic(value: str) -> dict[str, str]:
    return {"Authorization": "Basic " + base64.b64encode(value.encode()).decode()}


def test_auth_file_is_generated_once_kept_private_and_refused_when_exposed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "home" / auth.FILE_NAME
    first, origin = auth.ensure_auth_string(path)
    assert origin == "generated" and len(first) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again, origin = auth.ensure_auth_string(path)
    assert (again, origin) == (first, "stored")  # the workers' copy stays valid
    given, origin = auth.ensure_auth_string(path, "operator-chosen-string-0123456789")
    assert origin == "configured" and auth.read_auth_file(path) == given
    path.chmod(0o644)
    with pytest.raises(auth.ServeAuthError, match="chmod 600"):
        auth.ensure_auth_string(path)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("localhost", True),
     ("0.0.0.0", False), ("::", False), ("192.0.2.10", False), ("prefect.example", False)],
)  # fmt: skip
def test_only_loopback_may_serve_without_auth(host: str, loopback: bool) -> None:
    assert auth.is_loopback(host) is loopback
    auth.check_exposure(host, auth=True)
    if loopback:
        auth.check_exposure(host, auth=False)
    else:
        with pytest.raises(auth.ServeAuthError, match="without an auth string"):
            auth.check_exposure(host, auth=False)


def test_serve_beyond_loopback_without_auth_is_refused(
    tmp_path: Path, _clean_environment: None
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env["PREFECT_HOME"] = str(tmp_path)
    proc = run_cli(["serve", "--host", "0.0.0.0", "--no-auth", "--port", str(free_port())], env=env)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert "refusing to serve the Prefect API on 0.0.0.0 without an auth string" in out
    assert "Starting a local Prefect server" not in out


def test_serve_with_auth_runs_deployments_and_refuses_requests_without_it(
    s3: Any, bucket: str, tmp_path: Path, _clean_environment: None
) -> None:
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    put_many(s3, bucket, {f"docs/{i}.txt": f"document {i}".encode() for i in range(3)})
    home, data_dir = tmp_path / "home", tmp_path / "data"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_API")}
    env.pop(auth.SERVER_VARIABLE, None)
    env.update(PREFECT_HOME=str(home), INGEST_DATA_DIR=str(data_dir))
    env["PREFECT_WORKER_QUERY_SECONDS"] = "1"
    proc = run_cli(["serve", "--port", str(port)], env=env)
    out = Output(proc)
    api_url = f"http://127.0.0.1:{port}/api"
    try:
        out.wait_for("Worker started", deadline=240)
        path = home / auth.FILE_NAME
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        secret = path.read_text().strip()
        assert f"the auth string is in {path}" in out.text

        # Without the string, or with another, the API refuses; /health stays open.
        flows = f"{api_url}/flows/filter"
        assert httpx.post(flows, json={}).status_code == 401
        assert httpx.post(flows, json={}, headers=basic(secret + "x")).status_code == 401
        assert httpx.post(flows, json={}, headers=basic(secret)).status_code == 200
        assert httpx.get(f"{api_url}/health").status_code == 200

        # A deployment run, triggered by an authenticated client, run by serve's worker.
        run = run_s3_deployment(api_url, secret, bucket, s3.meta.endpoint_url)
        assert run.state.is_completed(), (run.state, out.text[-3000:])
        with (
            temporary_settings({PREFECT_API_URL: api_url, PREFECT_API_AUTH_STRING: secret}),
            get_client(sync_client=True) as client,
        ):
            # A command of the same user on this machine: only PREFECT_HOME in common.
            command_env = {k: v for k, v in env.items() if k != "INGEST_DATA_DIR"}
            args = ["s3", "--bucket", bucket, "--prefix", "docs/", "--no-extract"]
            args += ["--endpoint-url", s3.meta.endpoint_url]
            args += ["--data-dir", str(tmp_path / "command-data")]
            command = run_cli(args, env=command_env)
            said, _ = command.communicate(timeout=RUN_DEADLINE)
            assert command.returncode == 0, said
            assert "starting a local Prefect server" not in said
            run_id = next(
                line.split()[1].rstrip(":") for line in said.splitlines() if line.startswith("run ")
            )
            assert client.read_flow_run(UUID(run_id)).state.is_completed()
    finally:
        out.stop(proc)
    assert proc.returncode == 0, out.text[-3000:]
    assert secret not in out.text and secret not in said
    [n] = rows(data_dir, "SELECT count(*) AS n FROM s3_objects")
    assert n["n"] == 3


def test_a_commands_own_server_refuses_requests_without_its_string(
    tmp_path: Path, _clean_environment: None
) -> None:
    """The server a command starts for itself (no serve running, no API configured) has
    an auth string only that command holds: another user of the machine reaching its
    port gets 401."""
    with local_api.TemporaryServer(env={"PREFECT_HOME": str(tmp_path)}) as server:
        flows = f"{server.api_url}/flows/filter"
        assert httpx.post(flows, json={}).status_code == 401
        assert httpx.post(flows, json={}, headers=basic(server.auth_string)).status_code == 200
