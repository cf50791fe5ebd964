"""Two runs on one target (bucket and prefix) in one lake: the second waits for the
first, or skips with a message (``INGEST_S3_SAME_TARGET``), instead of doing all the
work again. The other run here is this test process holding the target's lease, so each
step is reached by reading the command's output, never by sleeping."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ingest import storage
from ingest.storage import leases
from tests.helpers import body_for, files_under, harness_api_url, put_many, rows, run_cli

pytestmark = pytest.mark.flow


def api_env() -> dict[str, str]:
    return {"PREFECT_API_URL": harness_api_url()}


def read_until(proc: subprocess.Popen[str], text: str) -> str:
    """The command's output up to the line holding ``text`` (all of it if it ends first)."""
    assert proc.stdout is not None
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if text in line:
            break
    return "".join(seen)


def test_a_second_run_waits_for_the_first(
    prefect_harness: None, s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    objects = {f"w/{i}.txt": body_for(f"w{i}") for i in range(30)}
    put_many(s3, bucket, objects)
    target = f"s3://{bucket}/w/"
    assert leases.try_take(data_dir, target, "the-first-run") is None  # this process holds it
    s3_server.reset_stats()
    args = ["s3", "--bucket", bucket, "--prefix", "w/", "--endpoint-url", s3_server.url]
    proc = run_cli([*args, "--data-dir", str(data_dir)], env=api_env())
    try:
        before = read_until(proc, "waiting:")
        assert "waiting: run the-first-run" in before and target in before, before
        assert s3_server.stats().get("LIST", 0) == 0  # it has not even listed
        assert storage.open_table(data_dir, "s3_objects") is None
    finally:
        leases.release(data_dir, target, "the-first-run")
    out = before + proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, out
    assert "30 objects (downloaded 30)" in out
    assert files_under(data_dir / "objects" / bucket) == {
        k.removeprefix("w/"): v for k, v in objects.items()
    }
    assert leases.holder(data_dir, target) is None  # given back at the end


def test_skip_says_who_holds_the_target(
    prefect_harness: None, s3: Any, s3_server: Any, bucket: str, data_dir: Path
) -> None:
    put_many(s3, bucket, {"s/a.txt": b"a"})
    target = f"s3://{bucket}/s/"
    assert leases.try_take(data_dir, target, "the-other-run") is None
    s3_server.reset_stats()
    args = ["s3", "--bucket", bucket, "--prefix", "s/", "--endpoint-url", s3_server.url]
    proc = run_cli(
        [*args, "--data-dir", str(data_dir)],
        env={**api_env(), "INGEST_S3_SAME_TARGET": "skip"},
    )
    out = proc.communicate(timeout=300)[0]
    leases.release(data_dir, target, "the-other-run")
    assert proc.returncode == 0, out
    assert "skipped: run the-other-run" in out and target in out
    assert s3_server.stats().get("LIST", 0) == 0
    assert storage.open_table(data_dir, "s3_objects") is None
    # another prefix of the same bucket is another target: it runs
    put_many(s3, bucket, {"t/b.txt": b"b"})
    args = ["s3", "--bucket", bucket, "--prefix", "t/", "--endpoint-url", s3_server.url]
    other = run_cli([*args, "--data-dir", str(data_dir)], env=api_env())
    assert "1 objects (downloaded 1)" in other.communicate(timeout=300)[0]
    assert rows(data_dir, "SELECT key FROM s3_objects") == [{"key": "t/b.txt"}]


def test_a_dead_holders_lease_is_taken_over(tmp_path: Path) -> None:
    """A lease naming a process of this host that is gone, or not renewed for longer than
    stale_after, belongs to a run that died."""
    gone = subprocess.Popen([sys.executable, "-c", "import os; print(os.getpid())"])
    gone.wait()
    target = "s3://b/p/"
    key = leases.lease_key(target)
    body = f'{{"run_id": "dead", "host": "{socket.gethostname()}", "pid": {gone.pid}, '
    body += f'"target": "{target}"}}'
    (tmp_path / Path(key)).parent.mkdir(parents=True)
    (tmp_path / Path(key)).write_text(body)
    assert leases.holder(tmp_path, target) is None
    assert leases.try_take(tmp_path, target, "next") is None
    assert leases.holder(tmp_path, target) is not None
    assert leases.holder(tmp_path, target).run_id == "next"  # type: ignore[union-attr]
    # alive (this process) but not renewed for longer than stale_after
    old = os.stat(tmp_path / Path(key)).st_mtime - 1000
    os.utime(tmp_path / Path(key), (old, old))
    assert leases.holder(tmp_path, target, stale_after=500) is None
    assert leases.try_take(tmp_path, target, "third", stale_after=500) is None
    assert leases.try_take(tmp_path, target, "fourth", stale_after=500) is not None
