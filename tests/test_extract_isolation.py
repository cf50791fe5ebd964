"""A parser that hangs, raises or kills its process costs one row; the run goes on."""

from __future__ import annotations

import os
import signal
import time
from datetime import UTC, datetime
from multiprocessing import forkserver
from pathlib import Path

from ingest.extract import pool as pool_module
from ingest.extract.batch import INTERRUPTED, extract_batch, to_document
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings

HOOK = "tests.extract_support:misbehaving_extractor"


def test_hang_crash_and_raise_do_not_stop_the_run(tmp_path: Path) -> None:
    names = ["a-good.txt", "b-hang.txt", "c-good.txt", "d-crash.txt", "e-raise.txt", "f-good.txt"]
    stored = []
    for i, name in enumerate(names):
        path = tmp_path / name
        path.write_text(f"문서 {i} text of {name}", encoding="utf-8")
        stored.append((name, f"etag-{i}", str(path)))
    with WorkerPool(PoolConfig(workers=2, time_limit=3, preload=(HOOK,))) as pool:
        before = set(pool.pids())
        docs = extract_batch(Settings(), "b", stored, run_id="r", pool=pool, extractor=HOOK)
        by_key = {d.key: d for d in docs}
        assert [d.key for d in docs] == names  # one row each, in order
        assert by_key["b-hang.txt"].status == "timeout"
        assert "time limit" in (by_key["b-hang.txt"].error or "")
        assert by_key["d-crash.txt"].status == "failed"
        assert "SIGSEGV" in (by_key["d-crash.txt"].error or "")
        assert by_key["e-raise.txt"].status == "failed"
        assert "parser bug" in (by_key["e-raise.txt"].error or "")
        for name in ("a-good.txt", "c-good.txt", "f-good.txt"):
            assert by_key[name].status == "ok"
            assert by_key[name].text.startswith("문서")
        assert all(d.kind == "txt" for d in docs)
        # The hung and the crashed workers were replaced; the pool still has two and works.
        assert pool.stats.timeouts == 1 and pool.stats.crashes == 1
        assert pool.stats.replaced >= 2
        assert len(pool.pids()) == 2 and set(pool.pids()) != before
        again = extract_batch(Settings(), "b", stored[:1], run_id="r2", pool=pool, extractor=HOOK)
        assert again[0].status == "ok"


def test_memory_limit_turns_a_balloon_into_a_row(tmp_path: Path) -> None:
    path = tmp_path / "x.txt"
    path.write_text("x")
    with WorkerPool(PoolConfig(workers=1, time_limit=30, memory_limit_mb=1024)) as pool:
        outcome = pool.submit("tests.extract_support:allocate", 4 * 1024**3).result()
        assert outcome.status in ("error", "crashed")
        assert outcome.status == "crashed" or "MemoryError" in (outcome.error or "")
        assert pool.submit("os:getpid").result().status == "ok"


STARTED = "tests.extract_support:started_then_wait"


def job_started(flag: Path, not_pid: int = 0) -> int:
    """The pid of the worker running the job, once it has written it (polled, deadline)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if flag.exists() and flag.read_text() and int(flag.read_text()) != not_pid:
            return int(flag.read_text())
        time.sleep(0.01)  # polling for the job's own start mark
    raise AssertionError("the job did not start")


def test_a_job_whose_worker_and_fork_server_are_killed_is_tried_again(tmp_path: Path) -> None:
    """Killed from outside with the fork server, the worker's exit status is lost (255):
    not the file's fault, so the job gets its one more try and completes."""
    flag = tmp_path / "started"
    # The process's shared pools have workers of the fork server killed below: close them
    # first, so later tests get fresh pools (their workers' status would be lost too).
    pool_module._close_shared()
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        future = pool.submit(STARTED, str(flag), 1.0)
        worker = job_started(flag)
        server = forkserver._forkserver._forkserver_pid  # type: ignore[attr-defined]
        assert server
        os.kill(server, signal.SIGKILL)
        os.kill(worker, signal.SIGKILL)
        outcome = future.result(120)
        assert (outcome.status, outcome.value) == ("ok", "done"), outcome
        assert int(flag.read_text()) != worker


def test_a_job_killed_twice_is_interrupted_and_left_for_the_next_run(tmp_path: Path) -> None:
    flag = tmp_path / "started"
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        future = pool.submit(STARTED, str(flag), 60.0)
        first = job_started(flag)
        os.kill(first, signal.SIGKILL)
        os.kill(job_started(flag, not_pid=first), signal.SIGKILL)
        outcome = future.result(120)
        assert outcome.status == "interrupted", outcome
        assert "SIGKILL, twice" in (outcome.error or "")
    doc = to_document("b", "k.txt", "e1", str(flag), outcome, run_id="r", now=datetime.now(UTC))
    # A failed row that says why, at a version that is never current: the next run's
    # find-changes extracts the file again.
    assert doc.status == "failed" and doc.extractor_version == INTERRUPTED
    assert "the next run tries again" in (doc.error or "")
