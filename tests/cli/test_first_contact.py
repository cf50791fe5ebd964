"""A new user's first commands: a fresh Prefect home and no server, mistakes said in a few
lines, Ctrl-C that stops the run and keeps what it did.

Each command runs as a user's shell runs it: a child process with a new, empty HOME (no
``~/.prefect``), no ``PREFECT_API_URL`` and ``PYTHONDONTWRITEBYTECODE=1``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner

from cli.main import app
from deployments import local_api
from dev.servers.s3 import DevServer
from tests.helpers import body_for, put_many, rows, run_cli

pytestmark = pytest.mark.flow


def new_user_env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    return env


def finish(proc: subprocess.Popen[str], timeout: float = 600) -> str:
    out, _ = proc.communicate(timeout=timeout)
    return out


def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except OSError:
        return False


@pytest.mark.server  # its command starts Prefect's temporary server on a new home
def test_fresh_prefect_home_without_a_server(
    s3: Any, s3_server: DevServer, bucket: str, tmp_path: Path
) -> None:
    """The first command on a new machine creates Prefect's database, runs, and stops the
    server it started (it used to fail when that first start took over 20 s)."""
    objects = {f"docs/{i}.txt": body_for(f"{bucket}/{i}") for i in range(12)}
    put_many(s3, bucket, objects)
    home, data = tmp_path / "home", tmp_path / "data"
    home.mkdir()
    args = ["s3", "--bucket", bucket, "--prefix", "docs/", "--endpoint-url", s3_server.url]
    out = finish(run_cli([*args, "--data-dir", str(data)], env=new_user_env(home)))
    assert "12 objects (downloaded 12)" in out, out
    assert (home / ".prefect" / "prefect.db").stat().st_size > 0
    assert "Traceback" not in out and "Timed out" not in out
    # The run's link names the command's own server, which is gone once the command ends.
    api = re.search(r"View at (http://127\.0\.0\.1:\d+)/", out)
    assert api is not None, out
    assert not answers(f"{api.group(1)}/api/health")
    assert {r["status"] for r in rows(data, "SELECT status FROM s3_objects")} == {"downloaded"}


def test_startup_timeout_covers_a_first_migration(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(local_api.STARTUP_TIMEOUT_VARIABLE, raising=False)
    assert local_api.startup_timeout() >= 300  # Prefect's own default is 20 s
    monkeypatch.setenv(local_api.STARTUP_TIMEOUT_VARIABLE, "45")
    assert local_api.startup_timeout() == 45.0


def test_data_dir_that_is_a_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "afile").write_text("not a folder")
    data = tmp_path / "afile" / "data"
    args = ["s3", "--bucket", "some-bucket", "--data-dir", str(data)]
    proc = run_cli(args, env=new_user_env(home))
    out = finish(proc)
    assert proc.returncode == 2, out
    assert "is a file" in out and "Traceback" not in out
    assert len(out.strip().splitlines()) == 1
    args = ["s3", "--bucket", "some-bucket", "--data-dir", str(tmp_path / "100%")]
    proc = run_cli(args, env=new_user_env(home))
    assert "'%'" in finish(proc) and proc.returncode == 2


def test_the_demo_says_it_runs_from_a_checkout() -> None:
    """The demo needs the dev tools that the package leaves out: ``ingest demo`` (hidden,
    options and all) and ``ingest serve --demo`` say in one line where it runs instead of
    "No such command" (or starting production's deployments)."""
    for args in (["demo"], ["demo", "--data-dir", "x"]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, result.output
        assert result.output.strip() == (
            "error: the demo runs from a checkout of the project: make demo (python -m dev.demo)"
        )
    assert " demo " not in CliRunner().invoke(app, ["--help"]).output
    result = CliRunner().invoke(app, ["serve", "--demo"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: the demo runs from a checkout of the project: make serve SERVE_ARGS=--demo "
        "(python -m dev.serve_demo)"
    )
    assert "--demo" not in CliRunner().invoke(app, ["serve", "--help"]).output


def test_missing_bucket_says_what_to_fix(
    prefect_harness: None, s3_server: DevServer, data_dir: Path, tmp_path: Path
) -> None:
    from prefect.settings import get_current_settings

    env = new_user_env(tmp_path)
    env["PREFECT_API_URL"] = str(get_current_settings().api.url)  # the session's server
    args = ["s3", "--bucket", "no-such-bucket-here", "--endpoint-url", s3_server.url]
    args += ["--data-dir", str(data_dir)]
    proc = run_cli(args, env=env)
    out = finish(proc)
    assert proc.returncode == 2, out
    assert "NoSuchBucket (check the bucket name, the endpoint URL and the region)" in out
    assert "Traceback" not in out
    assert len(out.strip().splitlines()) <= 4  # the run's two lines, the cause, the hint
    debug = run_cli(["--debug", *args], env=env)
    out = finish(debug)
    assert debug.returncode == 2
    assert "Traceback" in out  # --debug shows what the run's logs keep


def test_the_printed_duration_is_the_one_stored_when_the_run_ended(
    prefect_harness: None,
    s3: Any,
    s3_server: DevServer,
    bucket: str,
    data_dir: Path,
    tmp_path: Path,
) -> None:
    """The command prints the run's duration as Prefect recorded it once the run ended:
    the figure its end-of-run hook committed to the run's ``flow_runs`` row and freshness
    rows, in the one commit that leaves nothing of the run staged."""
    from prefect.client.orchestration import get_client
    from prefect.settings import get_current_settings

    put_many(s3, bucket, {"in/a.txt": b"a", "in/b.txt": b"b"})
    env = new_user_env(tmp_path)
    env["PREFECT_API_URL"] = str(get_current_settings().api.url)  # the session's server
    args = ["s3", "--bucket", bucket, "--prefix", "in/", "--endpoint-url", s3_server.url]
    proc = run_cli([*args, "--data-dir", str(data_dir)], env=env)
    out = finish(proc)
    assert proc.returncode == 0, out
    said = re.search(r"run (\S+): .* ([\d.]+) s in Running \(its start to end in Prefect\)", out)
    assert said is not None and "up to this summary" not in out, out
    run_id, printed = said.group(1), said.group(2)
    with get_client(sync_client=True) as client:
        run = client.read_flow_run(run_id)
    interval = (run.end_time - run.start_time).total_seconds()
    assert printed == f"{interval:.2f}", (printed, interval)
    for table in ("flow_runs", "source_freshness", "source_nights"):
        [row] = rows(data_dir, f"SELECT seconds FROM {table} WHERE flow_run_id = '{run_id}'")
        assert row["seconds"] == pytest.approx(interval, abs=1e-6), (table, row)
    assert not list((data_dir / "staging").glob(f"{run_id}*")), "the run left staged rows"


@pytest.fixture
def slow_s3(tmp_path: Path) -> Iterator[DevServer]:
    """A link where every request takes 150 ms: a run of 600 objects at 8 in flight takes
    over 10 s, so an interrupt lands mid-run."""
    with DevServer(latency_ms=150) as server:
        yield server


@pytest.mark.server  # its command starts a server of its own, which Ctrl-C must outlive
@pytest.mark.parametrize(
    ("signum", "code", "said"),
    [(signal.SIGINT, 130, "interrupted:"), (signal.SIGTERM, 143, "terminated (SIGTERM):")],
    ids=["ctrl-c", "sigterm"],
)
def test_ctrl_c_stops_the_run_and_keeps_its_work(
    slow_s3: DevServer, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    """Ctrl-C (to the terminal's process group) and SIGTERM (to the command's process
    alone, as ``kill``, systemd's main process or Kubernetes send it) both stop the run
    within a request's time, keep what it stored, and say which in the exit code."""
    client = boto3.client("s3", endpoint_url=slow_s3.url, region_name="us-east-1")
    client.create_bucket(Bucket="slow-docs")
    objects = {f"docs/{i:04}.txt": body_for(f"slow/{i}") for i in range(600)}
    put_many(client, "slow-docs", objects)
    home, data = tmp_path / "home", tmp_path / "my data, 2026"  # a space: URIs escape it
    home.mkdir()
    env = new_user_env(home)
    args = ["s3", "--bucket", "slow-docs", "--prefix", "docs/", "--endpoint-url", slow_s3.url]
    args += ["--data-dir", str(data), "--concurrency", "8"]
    env["INGEST_S3_BATCH_SIZE"] = "100"
    # Its own session, so the interrupt goes to its process group, as a terminal's Ctrl-C.
    proc = run_cli(args, env=env, start_new_session=True)
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:  # the first batch's end: the run is under way
        seen.append(line)
        if "download-batch" in line and "objects" in line:
            break
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signal.SIGINT)
    else:
        os.kill(proc.pid, signal.SIGTERM)
    out = "".join(seen) + finish(proc, timeout=120)
    assert proc.returncode == code, out
    assert out.strip().splitlines()[-1].startswith(said)
    assert "Error logging to API" not in out and "Connection refused" not in out
    # The next run takes up where it stopped: the objects done before are not fetched again.
    rerun = finish(run_cli(args, env=env))
    done = re.search(r"600 objects \(downloaded (\d+), skipped (\d+)\)", rerun)
    assert done is not None, rerun
    assert 0 < int(done.group(1)) < 600
    stored = rows(data, "SELECT status, count(*) AS n FROM s3_objects GROUP BY status")
    assert stored == [{"status": "downloaded", "n": 600}]
    # Every object has its document row (the bodies are random bytes: some are not text).
    docs = rows(data, "SELECT count(DISTINCT key) AS n, count(*) AS r FROM documents")
    assert docs == [{"n": 600, "r": 600}]
