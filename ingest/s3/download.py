"""Downloading objects: one object in one GET (``fetch_small``), many objects on the
shared request pool (``BatchDownloader``), large ones as parallel byte ranges."""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ingest.errors import IntegrityError, ItemError, NotFetchedError
from ingest.records import S3Object
from ingest.s3.client import S3Connection
from ingest.s3.files import _publish, remove, temp_path
from ingest.s3.get import GET_BACKOFF, _stream, get_attempts
from ingest.s3.resume import Journal
from ingest.s3.verify import verify
from ingest.settings import S3Settings

log = logging.getLogger(__name__)


def integrity_passes(s3: S3Settings) -> int:
    """Downloads of one object whose body fails its check (size, MD5, multipart ETag,
    checksum) before it is a failed row: as many as the requests a 5xx answer gets, with
    the same backoff between them."""
    return get_attempts(s3)


@dataclass(slots=True)
class Fetched:
    """Outcome of one successful object download; ``head``: its first bytes, when asked."""

    attempts: int
    seconds: float
    head: bytes = b""


@dataclass(slots=True)
class _Ranged:
    """State of one object fetched as parallel byte ranges (one pass: all its ranges)."""

    obj: S3Object
    dest: str
    tmp: str
    fd: int
    started: float
    pending: int
    journal: Journal | None = None
    passes: int = 1
    attempts: int = 0
    error: BaseException | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


def fetch_small(
    conn: S3Connection,
    obj: S3Object,
    dest: str,
    root: str | os.PathLike[str],
    keep_head: int = 0,
) -> Fetched:
    """Download one object in one GET (resumed on a broken stream) to ``dest``.

    The bytes go to a temporary file that is renamed over ``dest`` only once
    the body has been checked against the object (``ingest.s3.verify``); a body that
    fails the check is fetched again, as a 5xx answer is (``integrity_passes``), before
    it becomes an error. No file with wrong bytes is left anywhere.
    ``keep_head``: bytes of the body's start to return (``Fetched.head``), as written.
    """
    started = time.perf_counter()
    attempts = 0
    passes = integrity_passes(conn.settings)
    for check in range(passes):
        tmp = temp_path(root)
        md5 = hashlib.md5(usedforsecurity=False)
        made = 0  # requests of this pass
        written = [0]
        head: list[bytes] = []
        # A raw descriptor: no buffered file object, and none of the stat, isatty and seek
        # calls open() makes (a small object is one write).
        fd = os.open(tmp, _TEMP_FLAGS, 0o644)
        try:
            try:

                def write(
                    offset: int,
                    chunk: bytes,
                    fd: int = fd,
                    md5: Any = md5,
                    n: Any = written,
                    head: list[bytes] = head,
                ) -> None:
                    if offset < keep_head:
                        if offset == 0:
                            head.clear()  # a resumed or repeated body starts over
                        head.append(bytes(memoryview(chunk)[: keep_head - offset]))
                    _write_all(fd, chunk)
                    md5.update(chunk)
                    n[0] += len(chunk)

                if obj.size:
                    made = _stream(conn, obj, 0, obj.size, write)
            finally:
                os.close(fd)
            verify(
                conn.client,
                obj,
                tmp,
                attempts=attempts + made,
                md5_hex=md5.hexdigest(),
                size=written[0],
            )
            _publish(tmp, dest)
            return Fetched(
                attempts + made, time.perf_counter() - started, b"".join(head)[:keep_head]
            )
        except IntegrityError as exc:
            remove(tmp)
            # Raised by _stream (made == 0, exc counts this pass) or by verify.
            attempts += made or exc.attempts
            exc.attempts = attempts
            if check == passes - 1:
                raise
            log.info("s3://%s/%s: %s; fetching again", obj.bucket, obj.key, exc)
            time.sleep(GET_BACKOFF.delay(check + 1))
        except BaseException:
            remove(tmp)
            raise
    raise AssertionError("unreachable")


_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def _write_all(fd: int, chunk: Any) -> None:
    """Write every byte of ``chunk`` (a regular file takes it in one call, but may not)."""
    written = os.write(fd, chunk)
    if written < len(chunk):
        view = memoryview(chunk)[written:]
        while view:
            view = view[os.write(fd, view) :]


def interrupted(obj: S3Object) -> NotFetchedError:
    """The outcome of a request not sent because the run was interrupted (Ctrl-C)."""
    return NotFetchedError(
        f"s3://{obj.bucket}/{obj.key}: not fetched, the run was interrupted",
        key=obj.key,
        attempts=0,
        retryable=True,
    )


class BatchDownloader:
    """Download many objects on the connection's request lanes (``S3Connection.lanes``).

    A small object is one queued job; an object of at least ``s3_range_threshold``
    bytes is split into range jobs written in place (``os.pwrite``) to one temporary
    file. The lanes are shared by every batch of the run, so the requests in
    flight stay at ``s3_concurrency`` across batch boundaries, and memory stays bounded
    by ``concurrency x CHUNK`` whatever the object sizes.
    """

    def __init__(self, conn: S3Connection, root: str | os.PathLike[str]) -> None:
        self.conn = conn
        self.settings = conn.settings
        self.root = root
        self.lanes = conn.lanes

    def run(
        self,
        jobs: list[tuple[S3Object, str]],
        on_landed: Callable[[S3Object, str, bytes], None] | None = None,
        head: int = 0,
    ) -> list[tuple[S3Object, str, Fetched | BaseException]]:
        """``(object, dest, Fetched or the error)`` of every job, once all have ended
        (in the order they ended). ``on_landed``: called on the lane with each small
        object, its path and its first ``head`` bytes as soon as it is in place (a
        failure there is logged, the download stands)."""
        done: list[tuple[S3Object, str, Fetched | BaseException]] = []
        total = len(jobs)
        if not total:
            return done
        ended = threading.Event()

        def finish(obj: S3Object, dest: str, outcome: Fetched | BaseException) -> None:
            done.append((obj, dest, outcome))
            # list.append and len are atomic: whichever job appends the last outcome
            # sees the full count (several may, and setting twice is harmless).
            if len(done) == total:
                ended.set()

        conn, settings, root, lanes = self.conn, self.settings, self.root, self.lanes

        def small(obj: S3Object, dest: str) -> Callable[[], None]:
            def job() -> None:
                if lanes.stopped:
                    finish(obj, dest, interrupted(obj))
                    return
                try:
                    outcome: Fetched | BaseException = fetch_small(
                        conn, obj, dest, root, keep_head=head if on_landed else 0
                    )
                except BaseException as exc:
                    outcome = exc
                if on_landed is not None and isinstance(outcome, Fetched):
                    try:
                        on_landed(obj, dest, outcome.head)
                    except Exception:
                        log.exception("s3://%s/%s: after its download", obj.bucket, obj.key)
                    outcome.head = b""
                finish(obj, dest, outcome)

            return job

        queued: list[Callable[[], None]] = []
        for obj, dest in jobs:
            if obj.size >= settings.range_threshold:
                queued.extend(self._ranged(obj, dest, finish))
            else:
                queued.append(small(obj, dest))
        self.lanes.add(queued)
        ended.wait()
        return done

    def _ranged(
        self,
        obj: S3Object,
        dest: str,
        finish: Callable[[S3Object, str, Fetched | BaseException], None],
        state: _Ranged | None = None,
    ) -> list[Callable[[], None]]:
        """The range jobs of one large object; the last to end verifies and publishes.

        The file is resumable (``ingest.s3.resume``): only the ranges a killed or failed
        run left missing are requested. ``state``: the previous pass of an object whose
        body failed its check (it starts over)."""
        size = self.settings.range_size
        ranges = [(start, min(start + size, obj.size)) for start in range(0, obj.size, size)]
        journal = Journal.open(self.root, obj)
        if journal is not None:
            tmp, fd = journal.tmp, journal.fd
            if journal.resumed:
                log.info(
                    "s3://%s/%s: resuming, %d of %d bytes on disk",
                    obj.bucket,
                    obj.key,
                    journal.resumed,
                    obj.size,
                )
            ranges = [piece for start, end in ranges for piece in journal.missing(start, end)]
        else:  # another run is fetching it: a private file, not resumable
            tmp = temp_path(self.root)
            fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            os.ftruncate(fd, obj.size)
        if not ranges:  # every byte was on disk: only the check and the publication
            ranges = [(0, 0)]
        if state is None:
            state = _Ranged(obj, dest, tmp, fd, time.perf_counter(), pending=len(ranges))
        else:
            state.tmp, state.fd, state.pending, state.error = tmp, fd, len(ranges), None
            state.passes += 1
        state.journal = journal

        def write(offset: int, chunk: bytes) -> None:
            os.pwrite(fd, chunk, offset)
            if journal is not None:
                journal.wrote(offset, offset + len(chunk))

        def one_range(start: int, end: int) -> None:
            outcome: int | BaseException
            if state.error is not None or start == end:  # another range failed: no requests
                outcome = 0
            elif self.lanes.stopped:
                outcome = interrupted(obj)
            else:
                try:
                    outcome = _stream(self.conn, obj, start, end, write)
                except BaseException as exc:
                    outcome = exc
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
                # Verification hashes the whole file: only once, when every range is in.
                ended = self._finish_ranged(state)
                if ended is not None:
                    finish(obj, dest, ended)
                else:  # the body failed its check: the object again, from byte 0
                    time.sleep(GET_BACKOFF.delay(state.passes))
                    self.lanes.add(self._ranged(obj, dest, finish, state))

        return [functools.partial(one_range, start, end) for start, end in ranges]

    def _finish_ranged(self, state: _Ranged) -> Fetched | BaseException | None:
        """The outcome of the object once its ranges ended; None when its body failed the
        check and another pass is due (``integrity_passes``)."""
        journal = state.journal
        try:
            os.close(state.fd)
            if state.error is not None:
                raise state.error
            verify(self.conn.client, state.obj, state.tmp, attempts=state.attempts)
            _publish(state.tmp, state.dest)
            if journal is not None:
                journal.discard()
            return Fetched(state.attempts, time.perf_counter() - state.started)
        except IntegrityError as exc:
            # Wrong bytes: nothing of this file is kept, not even for resuming.
            remove(state.tmp)
            if journal is not None:
                journal.discard()
            exc.attempts = exc.attempts or state.attempts
            if state.passes < integrity_passes(self.settings):
                log.info("s3://%s/%s: %s; fetching again", state.obj.bucket, state.obj.key, exc)
                return None
            return exc
        except BaseException as exc:
            if journal is not None:
                journal.close()  # what was written stays for the next run to resume
            else:
                remove(state.tmp)
            if isinstance(exc, ItemError) and not exc.attempts:
                exc.attempts = state.attempts
            return exc
