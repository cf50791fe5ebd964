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
* ``multiprocessing`` (which this pool used before) refuses to start children
  from a daemonic process, and a Dask worker under its nanny is one: the
  default of ``dask worker``, ``LocalCluster``, dask-kubernetes, dask-jobqueue.

So this pool keeps N worker processes (N = cores by default), forked from a
fork server of its own (``ingest.extract.forkserver``) that it starts with
``subprocess`` on the first job, and that imports the common parsers once
(``ingest.extract.worker``: the rarer ones on a worker's first file of their kind); each worker
is sent one job at a time over its own socket. Nothing is started before a job
arrives, so a run with nothing to extract pays nothing. A dispatcher thread in
the parent waits on the sockets, the workers' status pipes (their exit codes,
relayed by the fork server) and the earliest deadline:

* a result (or an exception inside the job) completes that job's future;
* a deadline passed: the worker is killed and replaced, the job is a ``timeout``;
* a worker that dies (segfault, killed by the memory limit, ``os._exit``):
  the job is ``crashed``, the worker is replaced, the pool goes on;
* a worker killed from outside (SIGKILL: someone killing the pool, the kernel's
  OOM killer; or its status lost with a killed fork server, which is started
  again): the file is not known to be at fault, so it gets one more try on a
  fresh worker; killed again, the job is ``interrupted`` (as are jobs of a pool
  whose dispatcher broke), which the caller records so that the next run tries
  it again.

Memory: each worker's address space is capped (``RLIMIT_AS``), so a parser
that balloons gets a ``MemoryError`` (a ``failed`` row) or dies (a
``crashed`` one) instead of taking the machine with it. Workers are also
recycled after ``max_jobs_per_worker`` jobs to bound slow leaks in the
native libraries. The pool is thread-safe: Prefect task threads submit to it
concurrently, and a run's batches in one process share the run's pool (held and
closed by its context, ``ingest.context.RunContext``). The fork server ends when
the pool closes or this process ends (end of file on its socket), and its workers
with it.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, Literal

from ingest.extract.spawn import STATUS_LOST, _Process, _Server
from ingest.extract.spawn import PoolConfig as PoolConfig

log = logging.getLogger(__name__)

# "budget": the job was still queued when its ``start_by`` passed (the run's extraction
# budget), so no worker took it.
OutcomeStatus = Literal["ok", "error", "timeout", "crashed", "interrupted", "budget"]


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
    start_by: float | None = None  # monotonic time after which no worker takes it


@dataclass(slots=True)
class _Worker:
    process: _Process | None = None  # None: waiting for the fork server
    conn: Connection | None = None
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
        self._lock = threading.Lock()
        self._queue: collections.deque[_Job] = collections.deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._closing = False
        self._next_id = 0
        self._start_failures = 0
        self._server: _Server | None = None
        self._workers: list[_Worker] = []  # filled on the first job (or ``warm``)
        self._warm = False
        self._thread = threading.Thread(target=self._run, name="extract-pool", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public

    def submit(self, ref: str, *args: Any, **kwargs: Any) -> Future[Outcome]:
        """Run ``ref`` (``"module:function"``) with the arguments in a worker."""
        return self.submit_by(None, ref, *args, **kwargs)

    def submit_by(
        self, start_by: float | None, ref: str, *args: Any, **kwargs: Any
    ) -> Future[Outcome]:
        """``submit``, unless no worker has taken the job by ``start_by`` (monotonic): then
        its outcome is ``budget`` and it never runs. Checked when a worker takes the job,
        not when it is queued: files queued as they land would otherwise all run, however
        late."""
        job = _Job(ref, args, kwargs, start_by=start_by)
        with self._lock:
            if self._closing:
                raise RuntimeError("the pool is closed")
            self._next_id += 1
            job.id = self._next_id
            self._queue.append(job)
        self._wake()
        return job.future

    def warm(self) -> None:
        """Start the fork server and the workers now, without a job, and return at once:
        a caller that knows documents are coming (their downloads have started) has the
        start-up run beside those downloads instead of before the first document."""
        with self._lock:
            if self._closing or self._workers:
                return
            self._warm = True
        self._wake()

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
        """The workers' process ids (none before the first job)."""
        return [w.process.pid for w in list(self._workers) if w.process is not None]

    @property
    def server_pid(self) -> int | None:
        """The fork server's process id, while it runs."""
        server = self._server
        return server.pid if server is not None else None

    def close(self) -> None:
        """Finish queued jobs, then stop the workers and the fork server."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        self._wake()
        self._thread.join()
        for w in self._workers:
            if w.conn is not None:
                with contextlib.suppress(OSError):
                    w.conn.send(None)
        deadline = time.monotonic() + 5
        for w in self._workers:
            if w.process is not None:
                w.process.join(max(0.0, deadline - time.monotonic()))
                if w.process.is_alive():
                    w.process.kill()
                    w.process.join(1)
                w.process.close()
            if w.conn is not None:
                w.conn.close()
        if self._server is not None:
            self._server.close()
            self._server = None
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

    def _start_pending(self) -> None:
        """Fork the workers that wait for one; start the fork server first if needed
        (its imports take a moment: the loop goes on and forks once it says ready)."""
        pending = [w for w in self._workers if w.process is None]
        if not pending:
            return
        if self._server is None:
            self._server = _Server(self.config)
            return
        if not self._server.ready:
            return
        for w in pending:
            try:
                w.conn, w.process = self._server.fork(self.config.start_timeout)
            except OSError as exc:
                log.warning("the extraction pool's fork server is gone (%r)", exc)
                self._server_failed()
                return
            w.deadline = time.monotonic() + self.config.start_timeout
            self.stats.started += 1

    def _server_failed(self) -> None:
        """The fork server ended, or never got ready: a new one starts for the next fork.
        Its workers end with it (their exit status is lost: see ``_crashed``)."""
        server, self._server = self._server, None
        if server is None:
            return
        if not server.ready:
            self._start_failed("the extraction pool's fork server failed to start")
        if server.process.poll() is None:
            server.process.kill()
        server.close()

    def _start_failed(self, what: str) -> None:
        self._start_failures += 1
        log.error("%s (%s in a row)", what, self._start_failures)
        if self._start_failures > 5 * self.config.size:
            raise RuntimeError("extraction workers keep failing to start")

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
                if (self._queue or self._warm) and not self._workers:  # the first job: start
                    self._workers = [_Worker() for _ in range(self.config.size)]
            self._start_pending()
            expired: list[_Job] = []
            with self._lock:
                for w in self._workers:
                    if w.ready and w.job is None:
                        job = self._take(expired)
                        if job is not None:
                            self._send(w, job)
            for job in expired:  # outside the lock: a future's callbacks run here
                job.future.set_result(
                    Outcome("budget", error="not started: its start-by time had passed")
                )
            server = self._server
            now = time.monotonic()
            deadlines = [w.deadline for w in self._workers if w.job is not None or not w.ready]
            waitables: list[Any] = [self._wake_r]
            if server is not None:
                waitables.append(server.ctrl)  # its "ready", or its end
                if not server.ready:
                    deadlines.append(server.deadline)
            workers = [w for w in self._workers if w.process is not None]
            for w in workers:
                assert w.process is not None and w.conn is not None
                waitables.append(w.process.sentinel)
                if w.job is not None or not w.ready:
                    waitables.append(w.conn)
            timeout = min(deadlines, default=now + 60) - now
            ready = set(wait(waitables, timeout=max(0.0, timeout)))
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
            if server is not None and server is self._server:
                if server.ctrl in ready:
                    if server.ready or not server.started():
                        self._server_failed()  # it ended (anything it says once ready is wrong)
                elif not server.ready and time.monotonic() >= server.deadline:
                    self._server_failed()
            for w in workers:
                assert w.process is not None
                if not w.ready:
                    self._starting(w, ready)
                elif w.job is None:
                    if w.process.sentinel in ready:  # an idle worker ended
                        self._replace(w, kill=True)
                elif w.conn in ready:
                    self._receive(w)
                elif w.process.sentinel in ready:
                    self._crashed(w)
                elif time.monotonic() >= w.deadline:
                    self._timed_out(w)

    def _starting(self, w: _Worker, ready: set[Any]) -> None:
        """A new worker: wait for its ``ready``; one that dies or hangs starting is replaced."""
        assert w.conn is not None and w.process is not None
        if w.conn in ready:
            try:
                w.ready = w.conn.recv() == "ready"
                self._start_failures = 0
                if w.ready and self._server is not None:
                    self._server.say_fenced()
                return
            except (EOFError, OSError):
                pass
        elif w.process.sentinel not in ready and time.monotonic() < w.deadline:
            return
        self._start_failed("an extraction worker failed to start")
        self._replace(w, kill=True)

    def _take(self, expired: list[_Job]) -> _Job | None:
        """The next queued job whose start-by time has not passed (under the lock); the
        ones whose time has passed go to ``expired``."""
        now = time.monotonic()
        while self._queue:
            job = self._queue.popleft()
            if job.start_by is None or now < job.start_by or job.retried:
                return job
            expired.append(job)
        return None

    def _send(self, w: _Worker, job: _Job) -> None:
        assert w.conn is not None
        w.job = job
        w.started = time.monotonic()
        w.deadline = w.started + self.config.time_limit
        try:
            w.conn.send((job.id, job.ref, job.args, job.kwargs))
        except (OSError, BrokenPipeError):
            self._crashed(w)

    def _receive(self, w: _Worker) -> None:
        assert w.conn is not None
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
        assert w.process is not None
        w.process.join(5)  # the fork server reaps it and sends its exit code
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
        assert w.process is not None
        job, w.job = w.job, None
        seconds, pid = time.monotonic() - w.started, w.process.pid
        self._replace(w, kill=True)
        if job is not None:
            self.stats.jobs += 1
            log.warning("extraction job %s: %s", status, error)
            job.future.set_result(Outcome(status, error=error, seconds=seconds, pid=pid))

    def _replace(self, w: _Worker, *, kill: bool) -> None:
        """Stop ``w`` and put a new worker in its place (forked at once when the fork
        server runs, else once a new one is ready)."""
        process, conn = w.process, w.conn
        if process is not None:
            if kill:
                process.kill()
            elif conn is not None:
                try:
                    conn.send(None)
                except (OSError, BrokenPipeError):
                    process.kill()
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join(5)
            process.close()
        if conn is not None:
            conn.close()
        self._workers[self._workers.index(w)] = _Worker()
        self.stats.replaced += 1
        self._start_pending()
