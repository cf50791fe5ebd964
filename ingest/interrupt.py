"""Ctrl-C for the work that runs on other threads than the one the signal reaches.

Python raises ``KeyboardInterrupt`` in the main thread only; a run's requests go on in
worker threads (the S3 request lanes, the REST paging loops) until their queues are
empty. The command that owns the terminal calls ``request()`` on the first Ctrl-C: every
queued S3 request then ends unsent (``requested()``), and every paging loop registered
with ``stoppable`` is cancelled, so the run ends within a request's time. What was
fetched and staged before stays for the next run.

The stoppers are the process's, not a run's: Ctrl-C reaches the process, so it stops
every run under way in it; each entry is removed when its loop ends (``stoppable``).

SIGTERM does the same (``on_terminate``): Prefect cancels a flow run in a process worker
with it, and systemd and Kubernetes stop services with it. Prefect's own handler raises
in the main thread only, so without ``request()`` the run's threads went on until their
queues were empty (13 minutes in the review) while the process could not exit.
"""

from __future__ import annotations

import itertools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

_requested = threading.Event()
_lock = threading.Lock()
_stoppers: dict[int, Callable[[], None]] = {}
_ids = itertools.count()


def requested() -> bool:
    """Whether the run was interrupted: work not yet started should not start."""
    return _requested.is_set()


def request() -> None:
    """Interrupt the process's work: flag it, and call every registered stopper once."""
    _requested.set()
    with _lock:
        stoppers = list(_stoppers.values())
        _stoppers.clear()
    for stop in stoppers:
        stop()


def clear() -> None:
    """The interrupted run is over (the command that called ``request`` ends its run)."""
    _requested.clear()


@contextmanager
def stoppable(stop: Callable[[], None]) -> Iterator[None]:
    """Call ``stop`` (from another thread) if the run is interrupted while the block runs."""
    key = next(_ids)
    with _lock:
        _stoppers[key] = stop
    if _requested.is_set():
        request()
    try:
        yield
    finally:
        with _lock:
            _stoppers.pop(key, None)


@contextmanager
def on_terminate() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM first stops the process's work
    (``request()``), then does what it did before: Prefect's handler in a flow run (the
    run ends, cancelled or crashed), the caller's (an ``ingest`` command's), or, with the
    default, the process exits with 143 (128 + SIGTERM). Elsewhere it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Any = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        request()
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGTERM) is on_sigterm:
            signal.signal(signal.SIGTERM, previous)
