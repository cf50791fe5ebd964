"""The fork server of one extraction pool:
``python -m ingest.extract.forkserver FD MB FENCE [REF ...]``.

``ingest.extract.pool`` starts it through ``subprocess``, not ``multiprocessing``:
a Dask worker under a nanny (the default of ``dask worker``, ``LocalCluster``,
dask-kubernetes, dask-jobqueue, Coiled) is a *daemonic* process, and
``multiprocessing`` refuses to start children from one. That refusal is a check in
``multiprocessing.Process.start`` only; a process started with ``subprocess`` may fork
as it likes, so the pool works on a stock cluster with no setting changed.

The server imports the parsers (``ingest.extract.worker``) and the job functions
``REF`` (``"module:function"``) once, then forks each worker from that warm state on
request: a worker, and every replacement of a crashed one, starts in milliseconds.
Each worker caps its own address space (``RLIMIT_AS``, ``MB``) and, when ``FENCE`` is
not ``-`` (JSON: the folders it may read and its scratch folder), fences itself
(``ingest.extract.fence``) before it says it is ready, and dies with the server (Linux
``PR_SET_PDEATHSIG``). The server itself holds no fence: it forks, and reaps.

Protocol on the control socket ``FD`` (an ``AF_UNIX`` stream the pool created):

* server -> pool: ``R`` once the imports are done;
* pool -> server: ``F`` (fork a worker); server -> pool: the worker's pid (8 bytes),
  carrying two descriptors (``SCM_RIGHTS``): the pool's end of the worker's job socket
  (a ``multiprocessing.connection.Connection``: length-prefixed pickles) and the read
  end of the worker's status pipe;
* the status pipe: when the worker ends, the server reaps it and writes its exit code
  (4 bytes, signed: ``-N`` when killed by signal ``N``), then closes the pipe. End of
  file with no code: the server itself is gone, and the status with it.
* end of file on the control socket (the pool closed it, or the pool's process died):
  the server kills its workers and exits.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import select
import signal
import socket
import struct
import sys
import traceback
from collections.abc import Sequence
from multiprocessing.connection import Connection

READY = b"R"
FORK = b"F"
PID = struct.Struct("q")
STATUS = struct.Struct("i")
PR_SET_PDEATHSIG = 1


def main(argv: Sequence[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    ctrl = socket.socket(fileno=int(args[0]))
    memory_limit_mb, fence, refs = int(args[1]), args[2], tuple(args[3:])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the pool's process's to handle

    from ingest.extract import worker  # the common parsers, imported once for every worker

    for ref in refs:
        worker.resolve(ref)
    if fence != "-":
        worker.fence_plan(fence)  # the fence's rules, worked out once for every worker
    gc.freeze()  # forked pages stay shared: collections in the workers do not touch them

    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select() through wake_w
    children: dict[int, int] = {}  # pid -> write end of its status pipe
    try:
        ctrl.sendall(READY)
        while True:
            ready, _, _ = select.select([ctrl.fileno(), wake_r], [], [])
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
                _reap(children)
            if ctrl.fileno() in ready:
                requests = ctrl.recv(64)
                if not requests:
                    return  # the pool is gone
                for _ in range(requests.count(FORK)):
                    _fork(ctrl, children, (wake_r, wake_w), memory_limit_mb, fence, refs)
    except (BrokenPipeError, ConnectionResetError):
        return
    finally:
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _fork(
    ctrl: socket.socket,
    children: dict[int, int],
    own: tuple[int, int],
    memory_limit_mb: int,
    fence: str,
    refs: tuple[str, ...],
) -> None:
    parent_end, child_end = socket.socketpair()
    status_r, status_w = os.pipe()
    server = os.getpid()
    pid = os.fork()
    if pid == 0:  # the worker
        code = 1
        try:
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            ctrl.close()
            parent_end.close()
            for fd in (*own, status_r, status_w, *children.values()):
                os.close(fd)
            _die_with(server)
            from ingest.extract.worker import serve  # imported by main before any fork

            serve(Connection(child_end.detach()), memory_limit_mb, refs, fence)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            os._exit(code)
    children[pid] = status_w  # before the reply: a pool gone meanwhile still gets it killed
    child_end.close()
    try:
        socket.send_fds(ctrl, [PID.pack(pid)], [parent_end.fileno(), status_r])
    finally:
        parent_end.close()
        os.close(status_r)


def _reap(children: dict[int, int]) -> None:
    """Collect ended workers; each one's exit code goes down its status pipe."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        fd = children.pop(pid, None)
        if fd is None:
            continue
        with contextlib.suppress(OSError):  # the pool may have stopped listening
            os.write(fd, STATUS.pack(os.waitstatus_to_exitcode(status)))
        os.close(fd)


def _die_with(server: int) -> None:
    """A worker must not outlive its server (killed with the Dask worker, say): on Linux
    the kernel sends it SIGKILL when the server ends."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != server:  # the server ended before the request took effect
        os._exit(1)


if __name__ == "__main__":
    main()
