"""The pool's fork server seen from the pool (``ingest.extract.pool``): starting it with
``subprocess`` (a daemonic process may), forking a worker, the processes it forks, and
what they start with: an allow-listed environment and the parsers' fence
(``ingest.extract.fence``)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

from ingest.extract import fence
from ingest.extract.forkserver import FORK, PID, READY, STATUS

log = logging.getLogger("ingest.extract.pool")

# A worker's exit status is relayed by the fork server; when the fork server itself was
# killed, the status is lost and the worker is reported with this code.
STATUS_LOST = 255
SERVER = "ingest.extract.forkserver"


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """How many workers, and the limits each job runs under."""

    workers: int = 0  # 0: one per core
    time_limit: float = 120.0  # seconds per job
    memory_limit_mb: int = 2048  # address space per worker; 0: no limit
    max_jobs_per_worker: int = 1000
    # Job functions ("module:function") the fork server imports before it forks a worker.
    preload: tuple[str, ...] = ()
    start_timeout: float = 120.0  # seconds the fork server, or a new worker, may take to start
    # Folders whose files the workers may read (a run's download folders): with them, each
    # worker fences itself (``ingest.extract.fence``) where the kernel has Landlock, and
    # writes only in a scratch folder of its pool. None: no fence (a pool handed files from
    # anywhere, as the extraction tests' pools are).
    read_roots: tuple[str, ...] | None = None

    @property
    def size(self) -> int:
        return self.workers or os.cpu_count() or 1


class _Process:
    """A worker forked by the fork server. Not this process's child, so its exit code
    arrives on its status pipe (``sentinel``: readable once the worker has ended)."""

    def __init__(self, pid: int, sentinel: int) -> None:
        self.pid = pid
        self.sentinel = sentinel
        self.exitcode: int | None = None
        self._closed = False

    def join(self, timeout: float | None = None) -> None:
        if self.exitcode is None and not self._closed and wait([self.sentinel], timeout):
            try:
                data = os.read(self.sentinel, STATUS.size)
            except OSError:
                data = b""
            self.exitcode = STATUS.unpack(data)[0] if len(data) == STATUS.size else STATUS_LOST

    def is_alive(self) -> bool:
        self.join(0)
        return self.exitcode is None and not self._closed

    def kill(self) -> None:
        if self.is_alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            os.close(self.sentinel)


# What a parser's process keeps of the environment: how to find programs and libraries,
# locale, time zone, temporary folder, thread counts, OCR data. Nothing else, so no
# credential (AWS_*, GITHUB_TOKEN, PREFECT_API_KEY, PREFECT_API_AUTH_STRING, INGEST_*
# secrets, a source's API key) is readable by a hostile document's parser, in its memory
# or in /proc/<pid>/environ.
_KEPT = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TEMP",
        "TMP",
        "VIRTUAL_ENV",
        "LD_LIBRARY_PATH",
        "MALLOC_ARENA_MAX",
        "SYSTEMROOT",
        "TERM",
    }
)
_KEPT_PREFIXES = ("LC_", "PYTHON", "OMP_", "OPENBLAS_", "MKL_", "ARROW_", "TESSDATA", "COV")


def worker_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed part of ``environ`` that extraction processes start with."""
    return {k: v for k, v in environ.items() if k in _KEPT or k.startswith(_KEPT_PREFIXES)}


_said: set[str] = set()


def _say_once(level: int, message: str, *args: object) -> None:
    """Log ``message`` the first time this process says it (a run's pools are many)."""
    if message not in _said:
        _said.add(message)
        log.log(level, message, *args)


def _fence_plan(config: PoolConfig) -> tuple[str, str | None]:
    """The fork server's fence argument (JSON, or ``-``: no fence) and the scratch folder
    it made for its workers. Where the kernel has no Landlock the workers run as they would
    unfenced, and the log says so once."""
    if config.read_roots is None:
        return "-", None
    abi = fence.landlock_abi()
    if abi < 1:
        _say_once(
            logging.WARNING,
            "extraction workers run without a fence: this kernel has no Landlock, so a "
            "parser can read every file this user can (docs/security.md)",
        )
        return "-", None
    roots = []
    for root in config.read_roots:
        with contextlib.suppress(OSError):  # a download folder before its first download
            Path(root).mkdir(parents=True, exist_ok=True)
        roots.append(os.path.abspath(root))
    scratch = tempfile.mkdtemp(prefix="ingest-parse-")
    return json.dumps({"read": roots, "scratch": scratch}), scratch


class _Server:
    """The pool's fork server, started with ``subprocess`` (a daemonic process may)."""

    def __init__(self, config: PoolConfig) -> None:
        ours, theirs = socket.socketpair()
        # The server imports what this process would: the same ``ingest``, a test's job
        # hooks, a checkout run without installing it. -P: nothing from its working folder.
        env = {**worker_environment(os.environ), "PYTHONPATH": os.pathsep.join(_import_path())}
        self.config = config
        try:
            fenced, self.scratch = _fence_plan(config)
        except BaseException:
            ours.close()
            theirs.close()
            raise
        if self.scratch is not None:  # temporary files, and caches (ezdxf's fonts), land here
            env.update(dict.fromkeys(("TMPDIR", "TEMP", "TMP", "XDG_CACHE_HOME"), self.scratch))
        args = [str(theirs.fileno()), str(config.memory_limit_mb), fenced, *config.preload]
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-P", "-m", SERVER, *args],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=_stderr(),  # a parser's prints never mix into a command's output
                env=env,
            )
        except BaseException:
            ours.close()
            self._remove_scratch()
            raise
        finally:
            theirs.close()
        self.ctrl = ours
        self.ready = False
        self.deadline = time.monotonic() + config.start_timeout

    @property
    def pid(self) -> int:
        return self.process.pid

    def started(self) -> bool:
        """Read the server's word once its socket is readable: ready, or ended."""
        try:
            self.ready = self.ctrl.recv(1) == READY
        except OSError:
            self.ready = False
        return self.ready

    def fork(self, timeout: float) -> tuple[Connection, _Process]:
        """A new worker: its job connection and its process."""
        self.ctrl.settimeout(timeout)
        self.ctrl.sendall(FORK)
        data, fds, _flags, _addr = socket.recv_fds(self.ctrl, PID.size, 2)
        while data and len(data) < PID.size:
            more = self.ctrl.recv(PID.size - len(data))
            if not more:
                break
            data += more
        if len(data) != PID.size or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            raise ConnectionError("the fork server ended")
        for fd in fds:
            os.set_inheritable(fd, False)
        return Connection(fds[0]), _Process(PID.unpack(data)[0], fds[1])

    def close(self) -> None:
        """End of file on its socket: the server kills its workers and exits."""
        self.ctrl.close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._remove_scratch()

    def _remove_scratch(self) -> None:
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None

    def say_fenced(self) -> None:
        """Once a fenced worker is ready (it says so only after its fence is set)."""
        if self.scratch is None:
            return
        abi = fence.landlock_abi()
        _say_once(
            logging.INFO,
            "extraction workers fenced (Landlock ABI %s): they read the Python installation "
            "and %s, write only in their scratch folder%s",
            abi,
            ", ".join(self.config.read_roots or ()),
            ", and open no TCP connection" if abi >= 4 else "",
        )


def _import_path() -> list[str]:
    """This process's ``sys.path`` (``""``: the working folder), and the folder of the
    ``ingest`` it runs when an import hook found it instead (an editable install's finder)."""
    paths = [os.path.abspath(p) if p else os.getcwd() for p in sys.path if isinstance(p, str)]
    root = str(Path(__file__).resolve().parents[2])
    if root not in paths:
        paths.append(root)
    return paths


def _stderr() -> int:
    try:
        os.fstat(2)
    except OSError:
        return subprocess.DEVNULL
    return 2
