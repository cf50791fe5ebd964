"""What of a big object's download is already on disk, so that a run killed or failed
half-way resumes it instead of starting from byte 0.

A big object (fetched as byte ranges, ``ingest.s3.download``) is written to a
temporary file named after its bucket and key, not after the process
(``resume-<hash>.part`` in the download root's temporary folder), beside a journal
(``.part.done``): a first line with the ETag and size the bytes belong to, then one line
``start end`` for every piece written (appended after the piece is in the file, so the
journal never claims bytes the file does not hold; a process killed mid-line leaves a
line without its newline, which is ignored). The next run that fetches the same object
reads the journal and requests only the missing ranges, pinned with ``If-Match`` on the
listed ETag like every GET. A journal of another ETag or size (the object changed) is
started over. The whole file is still checked against the object's checksum before it
is published (``ingest.s3.verify``); a mismatch starts it over.

Two runs fetching the same object at once: the journal is locked (``flock``) by the
first; the second downloads to a private temporary file as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import time
from pathlib import Path

from ingest.records import S3Object
from ingest.s3.keys import TMP_DIR_NAME

PREFIX = "resume-"
# Leftovers of objects no run asked for again (deleted since, or now smaller than the
# range threshold) are removed by the sweep after this long.
KEEP_FOR = 7 * 24 * 3600.0

_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


def _merge(pieces: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(pieces):
        if merged and start <= merged[-1][1]:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


class Journal:
    """The resumable temporary file of one object (``fd``, opened read-write at the
    object's size) and what of it is written (``done``, merged byte ranges)."""

    def __init__(self, tmp: str, path: str, fd: int, jfd: int, done: list[tuple[int, int]]):
        self.tmp = tmp
        self.path = path
        self.fd = fd
        self._jfd = jfd
        self.done = done

    @classmethod
    def open(cls, root: str | os.PathLike[str], obj: S3Object) -> Journal | None:
        """The journal of ``obj`` under ``root``, locked; None when another live run holds
        it (or the folder refuses the lock)."""
        folder = os.path.join(root, TMP_DIR_NAME)
        os.makedirs(folder, exist_ok=True)
        name = hashlib.sha256(f"{obj.bucket}\0{obj.key}".encode()).hexdigest()[:32]
        tmp = f"{folder}/{PREFIX}{name}.part"
        path = f"{tmp}.done"
        jfd = os.open(path, _FLAGS | os.O_APPEND, 0o644)
        try:
            fcntl.flock(jfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(jfd)
            return None
        try:
            header = f"{obj.etag} {obj.size}\n"
            text = _read_all(jfd)
            done: list[tuple[int, int]] = []
            fresh = not text.startswith(header)
            if not fresh:
                for line in text[len(header) :].split("\n")[:-1]:  # the last: unfinished
                    start, _, end = line.partition(" ")
                    if start.isdigit() and end.isdigit() and int(end) <= obj.size:
                        done.append((int(start), int(end)))
            fd = os.open(tmp, _FLAGS, 0o644)
            if fresh or os.fstat(fd).st_size != obj.size:
                done = []
                os.ftruncate(jfd, 0)
                os.write(jfd, header.encode())
                os.ftruncate(fd, 0)
                os.ftruncate(fd, obj.size)
        except BaseException:
            os.close(jfd)
            raise
        return cls(tmp, path, fd, jfd, _merge(done))

    @property
    def resumed(self) -> int:
        """Bytes already on disk when the journal was opened."""
        return sum(end - start for start, end in self.done)

    def missing(self, start: int, end: int) -> list[tuple[int, int]]:
        """The parts of ``start..end-1`` not yet written."""
        out: list[tuple[int, int]] = []
        at = start
        for a, b in self.done:
            if b <= at or a >= end:
                continue
            if a > at:
                out.append((at, a))
            at = max(at, b)
        if at < end:
            out.append((at, end))
        return out

    def wrote(self, start: int, end: int) -> None:
        """Record bytes ``start..end-1`` as written (call after writing them)."""
        os.write(self._jfd, f"{start} {end}\n".encode())

    def close(self) -> None:
        """Keep the file and the journal for the next run (the lock is released)."""
        with contextlib.suppress(OSError):
            os.close(self._jfd)

    def discard(self) -> None:
        """Forget the journal (the file was published, or its bytes were wrong)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        self.close()


def _read_all(fd: int) -> str:
    chunks = []
    os.lseek(fd, 0, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks).decode("ascii", "replace")


def sweep(tmp_dir: Path, now: float | None = None) -> int:
    """Remove resumable files and journals untouched for ``KEEP_FOR`` and not locked."""
    now = time.time() if now is None else now
    removed = 0
    for path in tmp_dir.glob(f"{PREFIX}*.part.done"):
        try:
            if now - path.stat().st_mtime < KEEP_FOR:
                continue
            jfd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(jfd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(jfd)
            continue
        try:
            Path(str(path).removesuffix(".done")).unlink(missing_ok=True)
            path.unlink(missing_ok=True)
            removed += 1
        finally:
            os.close(jfd)
    return removed
