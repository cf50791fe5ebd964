"""The local Prefect server a command keeps when no Prefect API is configured: the first
command starts it and says so, the next ones use it without starting anything, their runs
are recorded on it, ``ingest server stop`` stops it, and it stops itself once unused for
``INGEST_SERVE_LOCAL_SERVER_IDLE`` seconds. Each test leaves no server behind."""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deployments import local_api
from dev.servers.s3 import DevServer
from tests.helpers import run_cli

pytestmark = [pytest.mark.flow, pytest.mark.server]  # servers of their own


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    """A Prefect home of the test's own; whatever kept server it gets is stopped after."""
    path = tmp_path / "prefect-home"
    path.mkdir()
    yield path
    advert = _advert(path)
    pid = advert.get("pid")
    if isinstance(pid, int) and local_api._alive(pid):
        os.kill(pid, 15)
        _wait_gone(pid)


def _advert(home: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((home / local_api.KEPT_FILE).read_text()))
    except (OSError, ValueError):
        return {}


def _wait_gone(pid: int, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not local_api._alive(pid):
            return True
        time.sleep(0.1)  # waiting for a process to end, not synchronising work
    return False


def env_of(home: Path, idle: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(local_api.PREFECT_DEFAULTS)
    env.update(PREFECT_HOME=str(home), INGEST_SERVE_LOCAL_SERVER_IDLE=idle)
    return env


def command(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    proc = run_cli(args, env=env)
    out, _ = proc.communicate(timeout=600)
    return proc.returncode, out


def flow_runs(api_url: str, auth: str) -> int:
    import base64

    req = urllib.request.Request(
        f"{api_url}/flow_runs/count",
        data=b"{}",
        method="POST",
        headers={
            "Content-Type": "application/json",
            "Authorization": "Basic " + base64.b64encode(auth.encode()).decode(),
        },
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(json.loads(r.read()))


def test_commands_keep_one_server_and_stop_it_on_request(
    s3: Any, s3_server: DevServer, bucket: str, home: Path, tmp_path: Path
) -> None:
    env = env_of(home, "600")
    args = ["s3", "--bucket", bucket, "--prefix", "none/", "--endpoint-url", s3_server.url]
    code, first = command([*args, "--data-dir", str(tmp_path / "d1")], env)
    assert code == 0, first
    said = "starting a local Prefect server, kept for the next commands until unused for 10 min"
    assert said in first
    assert "its first start creates its database" in first
    advert = _advert(home)
    keeper, api_url = advert["pid"], advert["api_url"]
    assert local_api._alive(keeper) and f"View at {api_url.removesuffix('/api')}/" in first

    code, second = command([*args, "--data-dir", str(tmp_path / "d2")], env)
    assert code == 0, second
    assert "starting a local Prefect server" not in second  # nothing started
    assert _advert(home)["pid"] == keeper and f"View at {api_url.removesuffix('/api')}/" in second
    auth = (home / local_api.KEPT_AUTH).read_text().strip()
    assert (home / local_api.KEPT_AUTH).stat().st_mode & 0o077 == 0  # this user's only
    assert flow_runs(api_url, auth) == 2  # both commands' runs recorded on it

    code, status = command(["server", "status"], env)
    assert code == 0 and f"local Prefect server at {api_url} (pid {keeper})" in status, status
    code, stopped = command(["server", "stop"], env)
    assert code == 0 and f"stopped the local Prefect server (pid {keeper})" in stopped, stopped
    assert _wait_gone(keeper)
    assert not (home / local_api.KEPT_FILE).exists() and not (home / local_api.KEPT_AUTH).exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{api_url}/health", timeout=2)
    code, status = command(["server", "status"], env)
    assert code == 1 and "no local Prefect server runs" in status


def test_a_kept_server_stops_itself_once_unused(home: Path) -> None:
    env = env_of(home, "3")
    code, out = command(["server", "start"], env)
    assert code == 0, out
    advert = _advert(home)
    assert f"local Prefect server at {advert['api_url']} (pid {advert['pid']})" in out
    assert _wait_gone(advert["pid"], timeout=120), "still running after 3 s unused"
    assert not (home / local_api.KEPT_FILE).exists()
    with pytest.raises(OSError):
        urllib.request.urlopen(f"{advert['api_url']}/health", timeout=2)
    # no server process of its own is left (the keeper stopped its uvicorn)
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    port = advert["api_url"].rsplit(":", 1)[1].split("/")[0]
    assert f"--port {port}" not in ps.stdout


def test_serve_stops_the_kept_server_and_takes_over(home: Path, tmp_path: Path) -> None:
    """``ingest serve`` on the same Prefect home stops the server the commands kept (not
    two servers on one database), says so, and serves on its own port."""
    from dev.servers.s3 import free_port
    from tests.deployments.test_serve_postgres import Output

    env = env_of(home, "600")
    code, out = command(["server", "start"], env)
    assert code == 0, out
    keeper = _advert(home)["pid"]
    assert local_api._alive(keeper)

    port = free_port()
    env.update(INGEST_DATA_DIR=str(tmp_path / "data"), PREFECT_WORKER_QUERY_SECONDS="1")
    proc = run_cli(["serve", "--port", str(port)], env=env)
    served = Output(proc)
    try:
        served.wait_for("Worker started", deadline=240)
        assert f"stopped the local Prefect server the commands kept (pid {keeper})" in served.text
        assert _wait_gone(keeper), "the kept server still runs beside serve"
        assert not (home / local_api.KEPT_FILE).exists()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/health", timeout=10) as r:
            assert r.status == 200
        code, status = command(["server", "status"], env)
        assert code == 1 and "no local Prefect server runs" in status, status
    finally:
        served.stop(proc)
