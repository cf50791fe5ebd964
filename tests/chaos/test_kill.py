"""``kill -9`` of ``ingest s3`` at seeded random points of each stage of its run.

The points are placed by what the run shows, not by wall-clock guesses. Prefect
writes a line to the command's log when each task run finishes
(``prepare-storage``, ``find-changes``, each ``download-batch``, ...). Each
trial picks a stage (the 20 points are spread evenly over listing, downloads,
extraction, summary and table commits, in seeded order), waits in the live run
for the progress where that stage is under way (storage prepared; j download
batches finished; downloads done; extraction done; summary published), and
kills the process a seeded delay later, shorter than the stage takes at its
quickest (``aim_at``). The stage the kill really landed in is read back from
the log as it stood at the kill, and recorded; docs/reliability.md shows the
distribution.

Listing 40 keys takes milliseconds, so the command reaches the S3 server
through the fault proxy, which holds each listing request for a second (a
slow listing); downloads are 30 ms a request.

Right after the kill, what users can see must be whole: every file under the
download folder is a complete object, every table file a reader would be sent
to is readable. Then a clean run in-process must leave the bucket's exact
contents, once each, with their documents.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dev.servers.faultproxy import FaultProxy
from dev.servers.s3 import DevServer
from flows.s3_ingest import s3_ingest
from ingest.s3.keys import TMP_DIR_NAME
from tests.chaos.conftest import s3_client
from tests.chaos.support import (
    FULL,
    Trial,
    check_s3,
    finished,
    lake_problems,
    record,
    rng,
    timed,
    trials,
    wait_for_log,
)
from tests.helpers import ROOT, harness_api_url, put_many

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

FAULT = "kill -9 of the flow process"
OBJECTS = 40
BATCH = 8
BATCHES = OBJECTS // BATCH
LIST_DELAY = 1.0  # seconds the proxy holds each listing request

# Boundaries of the run, in order: (name, seen in the log text).
Seen = Callable[[str], bool]
BOUNDARIES: list[tuple[str, Seen]] = [
    ("flow began", lambda t: "Beginning flow run" in t),
    ("storage prepared", lambda t: finished(t, "prepare-storage") >= 1),
    ("listed", lambda t: finished(t, "list-objects") >= 1),
    ("changes found", lambda t: finished(t, "find-changes") >= 1),
    ("downloaded", lambda t: finished(t, "download-batch") >= BATCHES),
    ("extracted", lambda t: finished(t, "extract-batch") >= BATCHES),
    ("summary published", lambda t: finished(t, "publish-summary") >= 1),
    ("committed", lambda t: finished(t, "commit-run") >= 1),
]
# A stage is the span between two boundaries; the kill targets five of them.
STAGES = {
    "listing": ("storage prepared", "listed"),
    "downloads": ("changes found", "downloaded"),
    "extraction": ("downloaded", "extracted"),
    # A first run has no upkeep (nothing of the lake is due): the summary follows extraction.
    "summary": ("extracted", "summary published"),
    "table commits": ("summary published", "committed"),
}
# What the run was doing when a boundary had not been seen yet.
DOING = {
    "flow began": "start-up",
    "storage prepared": "start-up",
    "listed": "listing",
    "changes found": "finding changes",
    "downloaded": "downloads",
    "extracted": "extraction",
    "summary published": "summary",
    "committed": "table commits",
}


def text_for(i: int) -> bytes:
    return (f"document {i} " + "floor plan section " * (200 + i * 13)).encode()


def _seen(name: str) -> Seen:
    return dict(BOUNDARIES)[name]


def landed(text: str) -> str:
    """The stage a run was in, from its log: the first boundary not yet seen."""
    for name, seen in BOUNDARIES:
        if not seen(text):
            return DOING[name]
    return "after the commit"


def _api_env() -> dict[str, str]:
    return {
        "PREFECT_API_URL": harness_api_url(),
        "INGEST_S3_BATCH_SIZE": str(BATCH),
        "PYTHONUNBUFFERED": "1",  # each log line reaches the file when it is written
    }


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


def aim_at(stage: str, r: Any) -> tuple[Seen, float, str]:
    """Where a kill aimed at ``stage`` waits in the log, the longest seeded delay after
    that, and a description. The waits are progress the run shows (batches finished), and
    the delays are shorter than the stage takes at its quickest (listing: the proxy holds
    each of its two listing requests ``LIST_DELAY``; downloads and extraction: the next
    batches take longer than 0.05 s; summary ~0.15 s; commits ~0.4 s), so a point lands
    in its stage however loaded the machine is."""
    if stage == "listing":
        return _seen("storage prepared"), 1.8 * LIST_DELAY, "storage prepared"
    if stage == "downloads":
        j = r.randrange(BATCHES - 1)
        done = _seen("changes found")
        return (lambda t: done(t) and finished(t, "download-batch") >= j), 0.05, f"{j} batches"
    if stage == "extraction":
        return _seen("downloaded"), 0.3, "downloads done"
    if stage == "summary":
        return _seen("extracted"), 0.1, "extraction done"
    return _seen("summary published"), 0.3, "summary published"


def plan(r: Any, n: int) -> list[str]:
    """The stage each trial aims at: evenly spread, seeded order."""
    names = list(STAGES)
    aims = [names[i % len(names)] for i in range(n)]
    r.shuffle(aims)
    return aims


@pytest.mark.timeout(3600)
def test_kill_at_random_points_then_rerun(tmp_path: Path) -> None:
    n = trials(20, 1)
    r = rng(FAULT)
    objects = {f"docs/{i:03d}.txt": text_for(i) for i in range(OBJECTS)}
    with DevServer(latency_ms=30) as slow, FaultProxy(slow.url) as proxy:
        proxy.plan([{"kind": "delay", "on": "list", "seconds": LIST_DELAY}])
        client = s3_client(slow.url)
        bucket = f"kill-{uuid.uuid4().hex[:8]}"
        client.create_bucket(Bucket=bucket)
        put_many(client, bucket, objects)

        aims = plan(r, n) if FULL else ["downloads"]
        problems, landings = [], []
        for i, aim in enumerate(aims):
            ready, longest, after = aim_at(aim, r)
            delay = r.uniform(0.0, longest)
            data_dir = tmp_path / f"t{i}"
            log = tmp_path / f"t{i}.log"
            proc = start(bucket, proxy.url, data_dir, log)
            wait_for_log(proc, log, ready)
            time.sleep(delay)  # the fault's random point inside the stage, not a synchronisation
            proc.send_signal(signal.SIGKILL)
            code = proc.wait()
            stage = landed(log.read_text(errors="replace"))
            point = f"aimed at {aim}: {delay:.2f} s after {after}"
            if code != -signal.SIGKILL:
                stage = "after the run ended"
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
            landings.append((aim, stage, point))
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
                    stage=stage,
                )
            )
            if not (ended and check.clean and not torn and not unreadable):
                problems.append((trial, check.detail, torn[:3]))
        if FULL:
            # The points must really spread over the run: every aimed stage was hit.
            hit = {stage for _, stage, _ in landings}
            assert set(STAGES) <= hit, landings
    assert not problems, problems
