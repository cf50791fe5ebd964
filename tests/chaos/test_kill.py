"""``kill -9`` of ``ingest s3`` at seeded random points of its run.

A reference run measures how long the flow takes (from "Beginning flow run" to
its exit); each trial starts the real command, waits for the flow to begin,
then kills the process after a delay drawn from that duration, so the points
fall across listing, downloads, extraction, table commits and the summary
(the stage the run had reached is read from its log). Right after the kill,
what users can see must be whole: every file under the download folder is a
complete object, every table file a reader would be sent to is readable. Then
a clean run in-process must leave the bucket's exact contents, once each, with
their documents.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from devservers.s3 import DevServer
from flows.s3_ingest import s3_ingest
from ingest.keys import TMP_DIR_NAME
from tests.chaos.conftest import s3_client
from tests.chaos.support import FULL, Trial, check_s3, lake_problems, record, rng, timed, trials
from tests.helpers import ROOT, put_many

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

FAULT = "kill -9 of the flow process"
STAGES = (
    "check-bucket",
    "prepare-storage",
    "plan-listing",
    "list-objects",
    "find-changes",
    "download-batch",
    "extract-batch",
    "extract-stored",
    "maintain-lake",
    "publish-summary",
    "commit-run",
)


def text_for(i: int) -> bytes:
    return (f"document {i} " + "floor plan section " * (200 + i * 13)).encode()


def _api_env() -> dict[str, str]:
    from prefect.settings import PREFECT_API_URL

    return {"PREFECT_API_URL": str(PREFECT_API_URL.value()), "INGEST_S3_BATCH_SIZE": "8"}


def start(bucket: str, url: str, data_dir: Path, log: Path) -> Any:
    args = ["s3", "--bucket", bucket, "--endpoint-url", url, "--data-dir", str(data_dir)]
    with log.open("w") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(
            [sys.executable, "-m", "cli.main", *args, "--concurrency", "4"],
            cwd=ROOT,
            env={**os.environ, **_api_env()},
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_for_flow(proc: Any, log: Path) -> float:
    """Poll the log for the flow's start (an observable event); its monotonic time."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if "Beginning flow run" in log.read_text(errors="replace"):
            return time.monotonic()
        if proc.poll() is not None:
            raise AssertionError(log.read_text())
        time.sleep(0.02)
    raise AssertionError("the flow did not begin")


def stage_reached(log: Path) -> str:
    seen = [
        m
        for m in re.findall(r"([a-z]+(?:-[a-z]+)+)", log.read_text(errors="replace"))
        if m in STAGES
    ]
    return seen[-1] if seen else "start-up"


@pytest.mark.timeout(3600)
def test_kill_at_random_points_then_rerun(tmp_path: Path) -> None:
    n = trials(20, 1)
    r = rng(FAULT)
    objects = {f"docs/{i:03d}.txt": text_for(i) for i in range(40)}
    with DevServer(latency_ms=30) as slow:
        client = s3_client(slow.url)
        bucket = f"kill-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=bucket)
        put_many(client, bucket, objects)

        # Reference run: how long the flow takes from its start to the process exit.
        ref_log = tmp_path / "ref.log"
        proc = start(bucket, slow.url, tmp_path / "ref", ref_log)
        began = wait_for_flow(proc, ref_log)
        assert proc.wait(300) == 0, ref_log.read_text()[-3000:]
        duration = time.monotonic() - began

        problems = []
        for i in range(n):
            delay = r.uniform(0, duration) if FULL else duration * 0.5
            data_dir = tmp_path / f"t{i}"
            log = tmp_path / f"t{i}.log"
            proc = start(bucket, slow.url, data_dir, log)
            wait_for_flow(proc, log)
            time.sleep(delay)  # the fault's random point, not a synchronisation
            proc.send_signal(signal.SIGKILL)
            code = proc.wait()
            point = f"{delay:.2f} s of {duration:.1f} s: {stage_reached(log)}"
            if code != -signal.SIGKILL:
                point += " (run had ended)"
            # What a killed run leaves must be whole where users look.
            root = data_dir / "objects" / bucket
            torn = [
                p
                for p in (root.rglob("*") if root.exists() else [])
                if p.is_file()
                and TMP_DIR_NAME not in p.parts
                and objects.get(p.relative_to(root).as_posix()) != p.read_bytes()
            ]
            unreadable = lake_problems(data_dir)
            with timed() as took:
                summary = s3_ingest(bucket=bucket, endpoint_url=slow.url, data_dir=str(data_dir))
            check = check_s3(client, bucket, data_dir, documents=True)
            ended = summary.counts.get("failed", 0) == 0
            trial = record(
                Trial(
                    FAULT,
                    point=point,
                    ended_as_expected=ended,
                    lost=check.lost,
                    duplicates=check.duplicates,
                    partial=check.partial + len(torn) + unreadable,
                    recover_seconds=took[0],
                )
            )
            if not (ended and check.clean and not torn and not unreadable):
                problems.append((trial, check.detail, torn[:3]))
    assert not problems, problems
