"""``make dev-s3 DIR=...`` (``python -m dev.s3_folder``): a local S3 server holding a folder,
with the endpoint, bucket and credentials printed, and ``ingest s3`` run on exactly what
it printed (no other AWS variable), until Ctrl-C or SIGTERM stops the server.

The script is started here with SIGINT ignored, as a shell starts a job in the background
(``nohup make test &``, or ``&`` in a script), and stopped with SIGTERM: the tests do not
depend on how they were started, and leave no server running."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from dev.servers.child import free_port, port_is_free
from dev.servers.s3 import DevServer
from tests.helpers import ROOT, rows


def start(folder: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """The script as a user starts it in the background (SIGINT ignored); returns it with
    what it printed before serving."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dev.s3_folder", str(folder), "--port", str(free_port()), *args],
        cwd=ROOT,
        env=without_aws(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=background,
    )
    assert proc.stdout is not None
    printed = []
    for line in proc.stdout:  # blocks until the script prints; it serves after the last line
        printed.append(line)
        if line.startswith("Ctrl-C"):
            break
    return proc, "".join(printed)


def background() -> None:
    """As a shell starts a job with ``&`` when job control is off: SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def without_aws() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def stop(proc: subprocess.Popen[str], endpoint: str | None = None) -> str:
    """SIGTERM, as a service manager stops it; its S3 server is gone with it."""
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    if endpoint is not None:
        assert port_is_free(int(endpoint.rsplit(":", 1)[1])), "its S3 server still runs"
    return out


def exported(printed: str) -> dict[str, str]:
    line = next(ln for ln in printed.splitlines() if ln.strip().startswith("export "))
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def test_an_empty_folder_gives_an_empty_bucket(tmp_path: Path) -> None:
    proc, printed = start(tmp_path, "--bucket", "empty-one")
    endpoint = re.search(r"endpoint: (\S+)", printed)
    try:
        assert endpoint, printed
        assert "bucket:   empty-one (0 objects)" in printed
        client = boto3.client("s3", endpoint_url=endpoint.group(1), **lower_keys(exported(printed)))
        assert client.list_objects_v2(Bucket="empty-one")["KeyCount"] == 0
    finally:
        assert "stopped" in stop(proc, endpoint.group(1) if endpoint else None)


def test_a_port_in_use_is_refused_and_nothing_is_uploaded(tmp_path: Path) -> None:
    """Another S3 server holds the port: the script says so in one line and exits 2, and
    the other server receives no bucket and no file."""
    (tmp_path / "secret-plan.txt").write_text("mine", encoding="utf-8")
    with DevServer() as other:
        proc = subprocess.run(
            [sys.executable, "-m", "dev.s3_folder", str(tmp_path), "--port", str(other.port)],
            cwd=ROOT,
            env=without_aws(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 2, proc.stdout + proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert lines == [
            f"error: port {other.port} is already in use by another process; choose a free "
            "one: make dev-s3 DIR=... PORT=<port> (or --port <port>)"
        ]
        assert proc.stdout == ""  # no endpoint printed as its own
        client = boto3.client(
            "s3",
            endpoint_url=other.url,
            aws_access_key_id="test",
            aws_secret_access_key="test",
            region_name="us-east-1",
        )
        assert client.list_buckets()["Buckets"] == []
        assert other.stats().get("PUT object", 0) == 0


def test_its_default_port_is_none_of_the_demos() -> None:
    from dev import s3_folder, serve_demo

    demo_ports = set(serve_demo.DemoServers().ports.values())
    assert len(demo_ports) == 3 and None not in demo_ports, demo_ports
    assert s3_folder.DEFAULT_PORT not in demo_ports


def lower_keys(env: dict[str, str]) -> dict[str, str]:
    return {
        "aws_access_key_id": env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": env["AWS_SECRET_ACCESS_KEY"],
        "region_name": env["AWS_DEFAULT_REGION"],
    }


def test_a_missing_folder_is_one_line(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "dev.s3_folder", str(tmp_path / "nothing")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "is not a folder" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.flow
def test_ingest_runs_on_what_it_printed(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    (folder / "plans").mkdir(parents=True)
    (folder / "plans" / "도면 1.txt").write_text("평면도 floor plan", encoding="utf-8")
    (folder / "notes.txt").write_text("site visit notes", encoding="utf-8")
    proc, printed = start(folder, "--prefix", "in/")
    try:
        assert "(2 objects under in/)" in printed, printed
        command = next(ln.strip() for ln in printed.splitlines() if "ingest s3 " in ln)
        args = command.split()[1:]  # the printed .venv/bin/ingest, as this Python's module
        data = tmp_path / "data"
        run = subprocess.run(
            [sys.executable, "-m", "cli.main", *args, "--data-dir", str(data)],
            cwd=ROOT,
            env={**without_aws(), **exported(printed)},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert "2 objects (downloaded 2)" in run.stdout, run.stdout
        found = rows(data, "SELECT key, status FROM s3_objects ORDER BY key")
        assert found == [
            {"key": "in/notes.txt", "status": "downloaded"},
            {"key": "in/plans/도면 1.txt", "status": "downloaded"},
        ]
    finally:
        stop(proc, re.search(r"endpoint: (\S+)", printed).group(1))  # type: ignore[union-attr]
