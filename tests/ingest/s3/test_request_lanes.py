"""The process-wide request lanes (``ingest.s3.client.RequestLanes``) and the batch
downloader on them: at most ``limit`` requests at once and all of them used, lanes
shared by batches running side by side, a failing job never losing a lane, and large
objects fetched as byte ranges through the same lanes. Real GETs against the moto
server on loopback; no Prefect."""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ingest import s3 as s3lib
from ingest.errors import ObjectChangedError
from ingest.records import S3Object
from ingest.s3 import keys
from ingest.s3.client import RequestLanes
from ingest.settings import Settings

MiB = 1024 * 1024


def test_lanes_run_up_to_the_limit_at_once_and_never_more() -> None:
    lanes = RequestLanes(4)
    lock = threading.Lock()
    active = [0, 0]  # now, most at once
    together = threading.Barrier(4, timeout=30)  # the first four must all run at once
    done: list[int] = []
    finished = threading.Event()

    def job(i: int) -> None:
        with lock:
            active[0] += 1
            active[1] = max(active)
        if i < 4:
            together.wait()
        with lock:
            active[0] -= 1
            done.append(i)
            if len(done) == 40:
                finished.set()

    lanes.add([lambda i=i: job(i) for i in range(40)])
    assert finished.wait(60)
    assert sorted(done) == list(range(40))
    assert active[1] == 4
    assert not together.broken


def test_a_failing_job_does_not_lose_its_lane_and_lanes_start_again() -> None:
    lanes = RequestLanes(2)
    ran: list[int] = []
    finished = threading.Event()

    def job(i: int) -> None:
        if i % 3 == 0:
            raise RuntimeError(f"job {i} broke")
        ran.append(i)
        if len(ran) == 6:
            finished.set()

    lanes.add([lambda i=i: job(i) for i in range(9)])
    assert finished.wait(60)
    assert sorted(ran) == [1, 2, 4, 5, 7, 8]
    again = threading.Event()
    lanes.add([again.set])  # after the queue ran dry: a lane starts for the new job
    assert again.wait(60)


@pytest.fixture
def objects(s3: Any, bucket: str) -> dict[str, bytes]:
    bodies = {
        f"small/{i:03d}.bin": hashlib.sha256(str(i).encode()).digest() * 40 for i in range(60)
    }
    bodies["large/ranged.bin"] = bytes(range(256)) * (3 * MiB // 256 + 1000)  # > 3 ranges
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return bodies


def listed(s3: Any, bucket: str, key: str) -> S3Object:
    head = s3.head_object(Bucket=bucket, Key=key)
    return S3Object(bucket, key, head["ETag"].strip('"'), head["ContentLength"], datetime.now(UTC))


def test_batches_side_by_side_share_the_lanes_and_large_objects_go_in_ranges(
    s3: Any, s3_server: Any, bucket: str, objects: dict[str, bytes], tmp_path: Path
) -> None:
    settings = Settings(
        data_dir=tmp_path / "data",
        s3={
            "endpoint_url": s3_server.url,
            "concurrency": 3,
            "range_threshold": MiB,
            "range_size": MiB,
        },
    )
    conn = s3lib.S3Connection.open(settings.s3)
    root = tmp_path / "objects"
    everything = [listed(s3, bucket, key) for key in sorted(objects)]
    first = listed(s3, bucket, "small/000.bin")
    stale = S3Object(bucket, first.key, "0" * 32, first.size, first.last_modified)
    halves = [everything[::2], [*everything[1::2], stale]]

    def run(batch: list[S3Object], sub: str) -> list[tuple[S3Object, str, Any]]:
        jobs = [(o, keys.local_path_for(o.key, "", root / sub)) for o in batch]
        return s3lib.BatchDownloader(conn, root / sub).run(jobs)

    with ThreadPoolExecutor(2) as pool:
        outcomes = list(pool.map(run, halves, ["a", "b"]))

    for half, got in zip(halves, outcomes, strict=True):
        assert sorted(o.key for o, _, _ in got) == sorted(o.key for o in half)
    for obj, dest, outcome in outcomes[0] + outcomes[1]:
        if obj is stale:
            assert isinstance(outcome, ObjectChangedError)
            continue
        assert isinstance(outcome, s3lib.Fetched), (obj.key, outcome)
        assert Path(dest).read_bytes() == objects[obj.key]
        if obj.key == "large/ranged.bin":
            assert outcome.attempts == -(-obj.size // MiB) == 4  # one GET per range
        else:
            assert outcome.attempts == 1
    assert not list(root.rglob("*.part"))  # no temporary file left, the failed one's too
