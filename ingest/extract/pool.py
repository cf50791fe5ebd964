"""Warm worker processes that run one file at a time under a time and memory limit.

Why not the obvious tools (measured on this 2-core machine, see
``benchmarks/extract.md``):

* ``ProcessPoolTaskRunner`` spawns its workers per flow run (7-11 s) and
  cloudpickles every argument; a task per file would also cost 5-9 ms of
  orchestration each.
* ``concurrent.futures.ProcessPoolExecutor`` has no per-task time limit
  (a hung parser holds its worker for ever) and a worker that dies (a
  segfault in a native library) breaks the whole executor
  (``BrokenProcessPool``): every pending file fails with it.

So this pool keeps N worker processes (N = cores by default) started from a
fork server that has imported the parsers once; each worker is sent one job
at a time over its own pipe. A dispatcher thread in the parent waits on the
pipes, the process sentinels and the earliest deadline:

* a result (or an exception inside the job) completes that job's future;
* a deadline passed: the worker is killed and replaced, the job is a ``timeout``;
* a worker that dies (segfault, killed by the memory limit, ``os._exit``):
  the job is ``crashed``, the worker is replaced, the pool goes on;
* a worker killed from outside (SIGKILL: someone killing the pool, the kernel's
  OOM killer; or its status lost with a killed fork server): the file is not
  known to be at fault, so it gets one more try on a fresh worker; killed
  again, the job is ``interrupted`` (as are jobs of a pool whose dispatcher
  broke), which the caller records so that the next run tries it again.

Memory: each worker's address space is capped (``RLIMIT_AS``), so a parser
that balloons gets a ``MemoryError`` (a ``failed`` row) or dies (a
``crashed`` one) instead of taking the machine with it. Workers are also
recycled after ``max_jobs_per_worker`` jobs to bound slow leaks in the
native libraries. The pool is thread-safe: Prefect task threads submit to it
concurrently, and one pool is kept warm per process (``shared_pool``).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

log = logging.getLogger(__name__)

# Tries to start one worker: a fork server that died is replaced on a later try, once
# multiprocessing sees it gone (a SIGKILL takes a moment to land).
START_ATTEMPTS = 5
START_PAUSE = 0.2  # seconds, times the attempt

OutcomeStatus = Literal["ok", "error", "timeout", "crashed", "interrupted"]
# A forkserver process's exit status is relayed by the fork server; when the fork server
# itself was killed, multiprocessing reports 255 (the status is lost).
STATUS_LOST = 255
PRELOAD = ["ingest.extract.worker"]


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """How many workers, and the limits each job runs under."""

    workers: int = 0  # 0: one per core
    time_limit: float = 120.0  # seconds per job
    memory_limit_mb: int = 2048  # address space per worker; 0: no limit
    max_jobs_per_worker: int = 1000
    # Job functions ("module:function") each worker imports before it says it is ready.
    preload: tuple[str, ...] = ()
    start_timeout: float = 120.0  # seconds a new worker may take to become ready

    @property
    def size(self) -> int:
        return self.workers or os.cpu_count() or 1


@dataclass(slots=True)
class Outcome:
    """What became of one job."""

    status: OutcomeStatus
    value: Any = None
    error: str | None = None
    seconds: float = 0.0
    pid: int = 0


@dataclass(slots=True)
class _Job:
    ref: str
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    future: Future[Outcome] = field(default_factory=Future)
    id: int = 0
    retried: bool = False  # sent again after its worker was killed from outside


@dataclass(slots=True)
class _Worker:
    process: Any
    conn: Connection
    job: _Job | None = None
    started: float = 0.0
    deadline: float = 0.0
    done: int = 0
    ready: bool = False


@dataclass(slots=True)
class PoolStats:
    started: int = 0
    replaced: int = 0
    timeouts: int = 0
    crashes: int = 0
    jobs: int = 0


class WorkerPool:
    """See the module docstring. Use as a context manager or call ``close``."""

    def __init__(self, config: PoolConfig | None = None) -> None:
        self.config = config or PoolConfig()
        self.stats = PoolStats()
        self._ctx = mp.get_context("forkserver")
        self._ctx.set_forkserver_preload(PRELOAD)
        self._lock = threading.Lock()
        self._queue: collections.deque[_Job] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._closing = False
        self._next_id = 0
        self._start_failures = 0
        self._workers: list[_Worker] = [self._start_worker() for _ in range(self.config.size)]
        self._thread = threading.Thread(target=self._run, name="extract-pool", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public

    def submit(self, ref: str, *args: Any, **kwargs: Any) -> Future[Outcome]:
        """Run ``ref`` (``"module:function"``) with the arguments in a worker."""
        job = _Job(ref, args, kwargs)
        with self._lock:
            if self._closing:
                raise RuntimeError("the pool is closed")
            self._next_id += 1
            job.id = self._next_id
            self._queue.append(job)
        self._wake()
        return job.future

    def map(self, ref: str, calls: Iterable[Sequence[Any]]) -> list[Outcome]:
        """Run ``ref(*call)`` for each call; outcomes in the order of the calls."""
        futures = [self.submit(ref, *call) for call in calls]
        return [f.result() for f in futures]

    @property
    def pending(self) -> int:
        """Jobs queued or running."""
        with self._lock:
            return len(self._queue) + sum(1 for w in self._workers if w.job is not None)

    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    def close(self) -> None:
        """Finish queued jobs, then stop the workers."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._wake()
        self._thread.join()
        for w in self._workers:
            with contextlib.suppress(OSError):
                w.conn.send(None)
        deadline = time.monotonic() + 5
        for w in self._workers:
            w.process.join(max(0.0, deadline - time.monotonic()))
            if w.process.is_alive():
                w.process.kill()
                w.process.join()
            w.conn.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ dispatcher

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError):  # already awake
            os.write(self._wake_w, b"x")

    def _start_worker(self) -> _Worker:
        from ingest.extract.worker import serve

        if mp.current_process().daemon:
            raise RuntimeError(
                "text extraction starts worker processes, which a daemonic process cannot: "
                "start Dask workers with DASK_DISTRIBUTED__WORKER__DAEMON=False (or --no-nanny)"
            )

        for attempt in range(1, START_ATTEMPTS + 1):
            parent, child = self._ctx.Pipe(duplex=True)
            process = self._ctx.Process(
                target=serve,
                args=(child, self.config.memory_limit_mb, self.config.preload),
                daemon=True,
                name="extract-worker",
            )
            try:
                process.start()
                break
            except (EOFError, OSError) as exc:
                # The fork server died (killed with the workers, say): multiprocessing
                # starts a new one on the next start, once it has reaped the old one.
                parent.close()
                child.close()
                if attempt == START_ATTEMPTS:
                    raise
                log.warning("extraction worker did not start (%r); starting it again", exc)
                time.sleep(START_PAUSE * attempt)
        child.close()
        self.stats.started += 1
        return _Worker(
            process=process, conn=parent, deadline=time.monotonic() + self.config.start_timeout
        )

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # never leave a caller waiting on a dead dispatcher
            log.exception("the extraction pool's dispatcher stopped")
            with self._lock:
                self._closing = True
                jobs = list(self._queue) + [w.job for w in self._workers if w.job is not None]
                self._queue.clear()
            for job in jobs:
                if not job.future.done():
                    job.future.set_result(
                        Outcome("interrupted", error=f"extraction pool broke: {exc}")
                    )

    def _loop(self) -> None:
        while True:
            with self._lock:
                if self._closing and not self._queue and all(w.job is None for w in self._workers):
                    return
                for w in self._workers:
                    if w.ready and w.job is None and self._queue:
                        self._send(w, self._queue.popleft())
            busy = [w for w in self._workers if w.job is not None or not w.ready]
            now = time.monotonic()
            timeout = min((w.deadline for w in busy), default=now + 60) - now
            waitables: list[Any] = [self._wake_r]
            for w in busy:
                waitables += [w.conn, w.process.sentinel]
            ready = set(wait(waitables, timeout=max(0.0, timeout)))
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
            for w in busy:
                if not w.ready:
                    self._starting(w, ready)
                elif w.conn in ready:
                    self._receive(w)
                elif w.process.sentinel in ready:
                    self._crashed(w)
                elif time.monotonic() >= w.deadline:
                    self._timed_out(w)

    def _starting(self, w: _Worker, ready: set[Any]) -> None:
        """A new worker: wait for its ``ready``; one that dies or hangs starting is replaced."""
        if w.conn in ready:
            try:
                w.ready = w.conn.recv() == "ready"
                self._start_failures = 0
                return
            except (EOFError, OSError):
                pass
        elif w.process.sentinel not in ready and time.monotonic() < w.deadline:
            return
        self._start_failures += 1
        log.error("an extraction worker failed to start (%s in a row)", self._start_failures)
        if self._start_failures > 5 * self.config.size:
            raise RuntimeError("extraction workers keep failing to start")
        self._replace(w, kill=True)

    def _send(self, w: _Worker, job: _Job) -> None:
        w.job = job
        w.started = time.monotonic()
        w.deadline = w.started + self.config.time_limit
        try:
            w.conn.send((job.id, job.ref, job.args, job.kwargs))
        except (OSError, BrokenPipeError):
            self._crashed(w)

    def _receive(self, w: _Worker) -> None:
        try:
            job_id, ok, value, error, pid = w.conn.recv()
        except (EOFError, OSError):
            self._crashed(w)
            return
        job = w.job
        assert job is not None and job.id == job_id
        w.job = None
        w.done += 1
        self.stats.jobs += 1
        seconds = time.monotonic() - w.started
        job.future.set_result(
            Outcome("ok" if ok else "error", value=value, error=error, seconds=seconds, pid=pid)
        )
        if w.done >= self.config.max_jobs_per_worker:
            self._replace(w, kill=False)

    def _crashed(self, w: _Worker) -> None:
        w.process.join(1)
        code = w.process.exitcode
        if code == STATUS_LOST:
            how = "ended, its exit status lost with the fork server (killed with it)"
        elif code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        self.stats.crashes += 1
        job = w.job
        if job is not None and code in (-signal.SIGKILL, STATUS_LOST):
            # Killed from outside (someone killing the pool, the kernel's OOM killer): the
            # file is not known to be at fault, so it gets one more try on a fresh worker
            # instead of a "crashed" row that no later run would retry.
            if not job.retried:
                job.retried = True
                w.job = None
                self._replace(w, kill=True)
                self._queue.appendleft(job)  # deque ends are thread-safe; the lock may be held
                log.warning("extraction worker %s; its file is tried again", how)
                return
            self._fail(w, "interrupted", f"worker process {how}, twice, while parsing this file")
            return
        self._fail(w, "crashed", f"worker process {how} while parsing this file")

    def _timed_out(self, w: _Worker) -> None:
        self.stats.timeouts += 1
        self._fail(w, "timeout", f"no result within the {self.config.time_limit:g} s time limit")

    def _fail(self, w: _Worker, status: OutcomeStatus, error: str) -> None:
        """Replace the worker first, then complete the job, so a caller that sees the
        outcome also sees the pool whole again."""
        job, w.job = w.job, None
        seconds, pid = time.monotonic() - w.started, w.process.pid
        self._replace(w, kill=True)
        if job is not None:
            self.stats.jobs += 1
            log.warning("extraction job %s: %s", status, error)
            job.future.set_result(Outcome(status, error=error, seconds=seconds, pid=pid))

    def _replace(self, w: _Worker, *, kill: bool) -> None:
        if kill and w.process.is_alive():
            w.process.kill()
        elif not kill:
            try:
                w.conn.send(None)
            except (OSError, BrokenPipeError):
                w.process.kill()
        w.process.join(5)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
        fresh = self._start_worker()
        self.stats.replaced += 1
        index = self._workers.index(w)
        self._workers[index] = fresh


_shared: dict[PoolConfig, WorkerPool] = {}
_shared_lock = threading.Lock()


def shared_pool(config: PoolConfig) -> WorkerPool:
    """One warm pool per configuration per process, closed at exit.

    A flow run's extract tasks (and the next flow run in a long-lived worker
    process) reuse it, so worker start-up is paid once, not per batch.
    """
    with _shared_lock:
        pool = _shared.get(config)
        if pool is None:
            pool = _shared[config] = WorkerPool(config)
        return pool


@atexit.register
def _close_shared() -> None:
    with _shared_lock:
        pools = list(_shared.values())
        _shared.clear()
    for pool in pools:
        try:
            pool.close()
        except Exception:  # exiting anyway; a stuck worker is killed by close()
            log.debug("closing an extraction pool failed", exc_info=True)
