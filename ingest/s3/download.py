"""Downloading objects: one object in one GET (``fetch_small``), many objects on the
shared request pool (``BatchDownloader``), large ones as parallel byte ranges."""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ingest.errors import IntegrityError, ItemError
from ingest.records import S3Object
from ingest.s3.client import request_pool
from ingest.s3.files import _publish, _verify, temp_path
from ingest.s3.get import _stream, get_attempts
from ingest.settings import Settings

log = logging.getLogger(__name__)

INTEGRITY_RETRIES = 1  # a body failing its size/MD5/CRC check is fetched once more


@dataclass(slots=True)
class Fetched:
    """Outcome of one successful object download."""

    attempts: int
    seconds: float


@dataclass(slots=True)
class _Ranged:
    """State of one object fetched as parallel byte ranges."""

    obj: S3Object
    dest: Path
    tmp: Path
    fd: int
    started: float
    pending: int
    attempts: int = 0
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def fetch_small(client: Any, obj: S3Object, dest: Path, root: Path, settings: Settings) -> Fetched:
    """Download one object in one GET (resumed on a broken stream) to ``dest``.

    The bytes go to a temporary file that is renamed over ``dest`` only once
    the size and (for single-part uploads) the MD5 have been checked; a body
    that fails those checks is fetched once more before it becomes an error.
    """
    started = time.perf_counter()
    attempts = 0
    for check in range(INTEGRITY_RETRIES + 1):
        tmp = temp_path(root)
        md5 = hashlib.md5(usedforsecurity=False)
        made = 0  # requests of this pass
        written = [0]
        try:
            with open(tmp, "wb") as f:

                def write(
                    offset: int, chunk: bytes, f: Any = f, md5: Any = md5, n: Any = written
                ) -> None:
                    f.write(chunk)
                    md5.update(chunk)
                    n[0] += len(chunk)

                if obj.size:
                    made = _stream(
                        client,
                        obj,
                        0,
                        obj.size,
                        write,
                        settings.s3_stream_retries,
                        get_attempts(settings),
                    )
            _verify(obj, tmp, md5.hexdigest(), attempts + made, size=written[0])
            _publish(tmp, dest)
            return Fetched(attempts + made, time.perf_counter() - started)
        except IntegrityError as exc:
            tmp.unlink(missing_ok=True)
            # Raised by _stream (made == 0, exc counts this pass) or by _verify.
            attempts += made or exc.attempts
            exc.attempts = attempts
            if check == INTEGRITY_RETRIES:
                raise
            log.info("s3://%s/%s: %s; fetching again", obj.bucket, obj.key, exc)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    raise AssertionError("unreachable")


class BatchDownloader:
    """Download many objects on the shared request pool.

    Small objects are fetched by *lanes*: up to ``concurrency`` jobs on the pool
    that each take the batch's next object until none is left, so the pool sees a
    few dozen jobs per batch instead of one future, callback and condition per
    object (a third of the client's Python time per small object before). An
    object of at least
    ``s3_range_threshold`` bytes is split into range jobs written in place
    (``os.pwrite``) to one temporary file. Memory stays bounded by
    ``concurrency x CHUNK`` whatever the object sizes.
    """

    def __init__(self, client: Any, settings: Settings, root: Path) -> None:
        self.client = client
        self.settings = settings
        self.root = root
        self.pool = request_pool(settings.s3_concurrency)

    def run(
        self, jobs: list[tuple[S3Object, Path]]
    ) -> Iterator[tuple[S3Object, Path, Fetched | BaseException]]:
        """Yield ``(object, dest, Fetched or the error)`` as lanes and ranged objects end."""
        done: list[tuple[S3Object, Path, Fetched | BaseException]] = []
        cond = threading.Condition()
        total = len(jobs)

        def finish(obj: S3Object, dest: Path, outcome: Fetched | BaseException) -> None:
            with cond:
                done.append((obj, dest, outcome))
                cond.notify()

        small: list[tuple[S3Object, Path]] = []
        for obj, dest in jobs:
            if obj.size >= self.settings.s3_range_threshold:
                self._submit_ranged(obj, dest, finish)
            else:
                small.append((obj, dest))
        queue = iter(small)
        take = threading.Lock()

        def lane() -> None:
            out: list[tuple[S3Object, Path, Fetched | BaseException]] = []
            try:
                while True:
                    with take:
                        job = next(queue, None)
                    if job is None:
                        return
                    obj, dest = job
                    try:
                        outcome: Fetched | BaseException = fetch_small(
                            self.client, obj, dest, self.root, self.settings
                        )
                    except BaseException as exc:
                        outcome = exc
                    out.append((obj, dest, outcome))
            finally:
                with cond:
                    done.extend(out)
                    cond.notify()

        for _ in range(min(len(small), self.settings.s3_concurrency)):
            self.pool.submit(lane)
        yielded = 0
        while yielded < total:
            with cond:
                while not done:
                    cond.wait()
                ready, done[:] = list(done), []
            for item in ready:
                yielded += 1
                yield item

    def _submit_ranged(
        self,
        obj: S3Object,
        dest: Path,
        finish: Callable[[S3Object, Path, Fetched | BaseException], None],
    ) -> None:
        size = self.settings.s3_range_size
        ranges = [(start, min(start + size, obj.size)) for start in range(0, obj.size, size)]
        tmp = temp_path(self.root)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(fd, obj.size)
        state = _Ranged(obj, dest, tmp, fd, time.perf_counter(), pending=len(ranges))

        def write(offset: int, chunk: bytes) -> None:
            os.pwrite(fd, chunk, offset)

        def one_range(start: int, end: int) -> int:
            if state.error is not None:  # another range failed: do not spend requests
                return 0
            return _stream(
                self.client,
                obj,
                start,
                end,
                write,
                self.settings.s3_stream_retries,
                get_attempts(self.settings),
            )

        def range_done(fut: Future[int]) -> None:
            outcome = _outcome(fut)
            with state.lock:
                if isinstance(outcome, BaseException):
                    state.error = state.error or outcome
                    if isinstance(outcome, ItemError):
                        state.attempts += outcome.attempts
                else:
                    state.attempts += outcome
                state.pending -= 1
                last = state.pending == 0
            if last:
                # Verification hashes the whole file: run it off the callback thread's hot path
                # only once, when every range is in.
                finish(obj, dest, self._finish_ranged(state))

        for start, end in ranges:
            self.pool.submit(one_range, start, end).add_done_callback(range_done)

    def _finish_ranged(self, state: _Ranged) -> Fetched | BaseException:
        try:
            os.close(state.fd)
            if state.error is not None:
                raise state.error
            _verify(state.obj, state.tmp, None, state.attempts)
            _publish(state.tmp, state.dest)
            return Fetched(state.attempts, time.perf_counter() - state.started)
        except BaseException as exc:
            state.tmp.unlink(missing_ok=True)
            if isinstance(exc, ItemError) and not exc.attempts:
                exc.attempts = state.attempts
            return exc


def _outcome(fut: Future[Any]) -> Any:
    exc = fut.exception()
    return exc if exc is not None else fut.result()
