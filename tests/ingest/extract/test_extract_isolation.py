"""A parser that hangs, raises or kills its process costs one row; the run goes on, in a
daemonic process too (a Dask worker under its nanny)."""

from __future__ import annotations

import multiprocessing as mp
import os
import resource
import signal
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

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
        docs = extract_batch(
            Settings().extracting, "b", stored, run_id="r", pool=pool, extractor=HOOK
        )
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
        again = extract_batch(
            Settings().extracting, "b", stored[:1], run_id="r2", pool=pool, extractor=HOOK
        )
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


def gone(pid: int) -> bool:
    """The process has ended (a zombie no one has reaped yet counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_job_whose_fork_server_is_killed_is_tried_again(tmp_path: Path) -> None:
    """Killed with its fork server (its workers die with it), the worker's exit status is
    lost: not the file's fault, so the job gets its one more try, on a new fork server."""
    flag = tmp_path / "started"
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        assert pool.server_pid is None and pool.pids() == []  # nothing runs before a job
        future = pool.submit(STARTED, str(flag), 1.0)
        worker = job_started(flag)
        server = pool.server_pid
        assert server
        os.kill(server, signal.SIGKILL)  # only the server: the worker must not outlive it
        outcome = future.result(120)
        assert (outcome.status, outcome.value) == ("ok", "done"), outcome
        assert int(flag.read_text()) != worker
        assert pool.server_pid not in (None, server)
        deadline = time.monotonic() + 30
        while not gone(worker):  # polling for the kernel's SIGKILL of the orphan
            assert time.monotonic() < deadline, f"worker {worker} outlived its fork server"
            time.sleep(0.01)


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


DAEMON_NAMES = ["a-good.txt", "b-hang.txt", "c-crash.txt", "d-exit.txt", "e-good.txt"]


def pool_in_a_daemon(folder: str, conn: Connection) -> None:
    """Runs in a daemonic process, as a Dask worker under its nanny does: multiprocessing
    would refuse it children. Sends back what the pool did there."""
    try:
        result: dict[str, Any] = {"daemon": mp.current_process().daemon}
        stored = []
        for i, name in enumerate(DAEMON_NAMES):
            path = Path(folder) / name
            path.write_text(f"문서 {i} of {name}", encoding="utf-8")
            stored.append((name, f"etag-{i}", str(path)))
        config = PoolConfig(workers=2, time_limit=2, memory_limit_mb=1024, preload=(HOOK,))
        with WorkerPool(config) as pool:
            docs = extract_batch(
                Settings().extracting, "b", stored, run_id="r", pool=pool, extractor=HOOK
            )
            result["rows"] = {d.key: (d.status, d.error or "", d.text) for d in docs}
            result["stats"] = (pool.stats.timeouts, pool.stats.crashes)
            limit = pool.submit("resource:getrlimit", resource.RLIMIT_AS).result()
            result["memory_limit"] = limit.value[0]
            with ThreadPoolExecutor(4) as threads:  # submitted from several threads at once
                outcomes = list(threads.map(lambda _: pool.submit("os:getpid").result(), range(40)))
            result["threaded"] = sorted({o.status for o in outcomes})
        with WorkerPool(PoolConfig(workers=1, max_jobs_per_worker=2)) as pool:
            pids = [pool.submit("os:getpid").result().value for _ in range(3)]
            result["recycled"] = pids[0] == pids[1] != pids[2]
        conn.send(result)
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def test_the_pool_works_inside_a_daemonic_process(tmp_path: Path) -> None:
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(target=pool_in_a_daemon, args=(str(tmp_path), theirs), daemon=True)
    child.start()
    theirs.close()
    try:
        assert ours.poll(180), "the daemonic process did not answer"
        result = ours.recv()
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert "error" not in result, result.get("error")
    assert result["daemon"] is True
    rows = result["rows"]
    assert list(rows) == DAEMON_NAMES  # one row each, in order
    assert rows["b-hang.txt"][0] == "timeout" and "time limit" in rows["b-hang.txt"][1]
    assert rows["c-crash.txt"][0] == "failed" and "SIGSEGV" in rows["c-crash.txt"][1]
    assert rows["d-exit.txt"][0] == "failed" and "exited with code 70" in rows["d-exit.txt"][1]
    for name in ("a-good.txt", "e-good.txt"):
        assert rows[name][0] == "ok" and rows[name][2].startswith("문서")
    assert result["stats"] == (1, 2)
    assert result["memory_limit"] == 1024 * 1024 * 1024  # RLIMIT_AS in the worker itself
    assert result["threaded"] == ["ok"]
    assert result["recycled"]


def pool_then_wait(flag: str, conn: Connection) -> None:
    """Start a pool with a job that runs for minutes, send its processes' pids, wait."""
    pool = WorkerPool(PoolConfig(workers=2, time_limit=600))
    pool.submit(STARTED, flag, 600.0)
    job_started(Path(flag))
    conn.send((pool.server_pid, pool.pids()))
    threading.Event().wait()  # until killed


def test_a_process_killed_takes_its_extraction_processes_with_it(tmp_path: Path) -> None:
    """The nanny kills its worker process at the memory limit, a machine loses it: the fork
    server sees its socket close and ends with its workers, even one busy with a job."""
    ctx = mp.get_context("spawn")
    ours, theirs = ctx.Pipe(duplex=False)
    child = ctx.Process(
        target=pool_then_wait, args=(str(tmp_path / "started"), theirs), daemon=True
    )
    child.start()
    theirs.close()
    try:
        assert ours.poll(120), "the pool did not start"
        server, workers = ours.recv()
    finally:
        child.kill()
        child.join()
    assert server and len(workers) == 2
    deadline = time.monotonic() + 30
    while not all(gone(pid) for pid in [server, *workers]):  # polling for them to end
        assert time.monotonic() < deadline, [(pid, gone(pid)) for pid in [server, *workers]]
        time.sleep(0.01)


def test_warm_pool_runs_jobs_and_closes_without_any() -> None:
    """``warm`` (twice: once is enough) starts the workers without a job; a warmed pool runs
    jobs as before, and one that never got a job still closes with its fork server."""
    import os

    from ingest.extract.pool import PoolConfig, WorkerPool

    with WorkerPool(PoolConfig(workers=2, time_limit=30)) as pool:
        assert pool.pids() == [] and pool.server_pid is None  # nothing before a job
        pool.warm()
        pool.warm()
        outcome = pool.submit("os:getpid").result(timeout=60)
        assert outcome.status == "ok" and outcome.value in pool.pids()
        assert outcome.value != os.getpid() and pool.stats.started == 2
    idle = WorkerPool(PoolConfig(workers=1, time_limit=30))
    idle.warm()
    idle.close()
    assert idle.server_pid is None


def test_a_pool_imports_the_rare_parsers_only_for_their_files(tmp_path: Path) -> None:
    """A pool's workers start with the common parsers only (no ezdxf, python-docx,
    pdfminer.six, nor pyarrow: ~0.5 s of CPU less per pool start); a worker that meets a
    DXF or a DOCX imports its parser then, and extracts it as a preloaded one did.

    The documents are generated here (the pool's fork server is a fresh interpreter, so
    what this process imported to write them does not reach the workers): the test runs
    on any clone, with or without the shared fixtures."""
    from dev import samples

    rare = ("ezdxf", "docx", "pdfminer", "pyarrow")
    probe = "tests.extract_support:modules_loaded"
    dxf, docx = tmp_path / "drawing.dxf", tmp_path / "letter.docx"
    dxf.write_bytes(samples.dxf(["VALVE V-12 CHECK"]))
    docx.write_bytes(samples.docx(["Inspection of the north wing"]))
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        assert pool.submit(probe, *rare).result(timeout=60).value == []
        for path, words in ((dxf, "VALVE V-12 CHECK"), (docx, "Inspection of the north wing")):
            job = ("ingest.extract:extract_stored", str(path), path.name, 100, 10_000_000)
            outcome = pool.submit(*job).result(timeout=60)
            assert outcome.status == "ok", outcome.error
            assert outcome.value.status == "ok" and words in outcome.value.text, outcome.value
        assert pool.submit(probe, *rare).result(timeout=60).value == ["ezdxf", "docx"]
        assert pool.stats.started == 1  # the same worker throughout
