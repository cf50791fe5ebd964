"""``make dev-s3 DIR=...`` (``python -m dev.s3_folder``): a local S3 server holding a folder,
with the endpoint, bucket and credentials printed, and ``ingest s3`` run on exactly what
it printed (no other AWS variable), until Ctrl-C stops the server."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from dev.servers.child import free_port
from tests.helpers import ROOT, rows


def start(folder: Path, *args: str) -> tuple[subprocess.Popen[str], str]:
    """The script as a user starts it; returns it with what it printed before serving."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "dev.s3_folder", str(folder), "--port", str(free_port()), *args],
        cwd=ROOT,
        env=without_aws(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    printed = []
    for line in proc.stdout:  # blocks until the script prints; it serves after the last line
        printed.append(line)
        if line.startswith("Ctrl-C"):
            break
    return proc, "".join(printed)


def without_aws() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    return out


def exported(printed: str) -> dict[str, str]:
    line = next(ln for ln in printed.splitlines() if ln.strip().startswith("export "))
    return dict(kv.split("=", 1) for kv in line.split()[1:])


def test_an_empty_folder_gives_an_empty_bucket(tmp_path: Path) -> None:
    proc, printed = start(tmp_path, "--bucket", "empty-one")
    try:
        endpoint = re.search(r"endpoint: (\S+)", printed)
        assert endpoint, printed
        assert "bucket:   empty-one (0 objects)" in printed
        client = boto3.client("s3", endpoint_url=endpoint.group(1), **lower_keys(exported(printed)))
        assert client.list_objects_v2(Bucket="empty-one")["KeyCount"] == 0
    finally:
        assert "stopped" in stop(proc)


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
        stop(proc)
