"""A run's context: what one run holds open, opened at its start and closed at its end.

``RunContext`` holds the run's settings and id, its lake session
(``ingest.storage.location.LakeSession``: the lake's resolved credentials and boto3
client, the DuckDB database for small queries; ``ctx.lake``, the run's lake location,
is bound to it, so every library function given ``ctx.lake`` reaches the lake through
it; the settings hold no session), its S3 connection (``ingest.s3.S3Connection``,
built on first use from the settings, or handed in: a test's client), its listing database
(``ingest.s3.changes.ListingDatabase``), its extraction pools
(``ingest.extract.pool.WorkerPool``, whose worker processes start with the first
document a parser reads), the local paths its batches gave out
(``ingest.s3.keys.RunClaims``), its files as they landed (``ingest.extract.landed.Landed``:
what their first bytes decided, or the parse started on its workers), when it started
extracting (its extraction budget), and what it works out once per run (``once``: its
ids on the Prefect server, its progress bars). Closing it closes what it opened: the
lake's client and database, the S3 client's connections, the request lanes, the listing
DuckDB, the extraction workers.

Library functions never look a context up: they take what they need (a connection, a
listing database) as arguments. Only the tasks (``tasks/``) find the context of their
run, by run id, among the contexts open in their process:

* the flow opens its context (``opened``) and closes it at its end; its tasks on the
  flow's own threads find that one;
* a task on a Dask worker (another process, maybe another machine) receives only small
  parameters (the settings without their secrets, the run id) and opens the run's
  context in that process on first use (``for_run``); the flow's batch runner closes
  those on every worker at the run's end (``close_run``, ``tasks.runners.batch_runner``).

That table of open contexts is the one piece of a run's state kept by a module: a task
cannot receive an open client or database as a parameter (on Dask it is pickled
through the scheduler), so it finds them where it runs. It holds only the contexts
runs opened, and each is closed explicitly by its run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from ingest import catalog
from ingest.extract.batch import ocr_pool_config, parse_as_landed, pool_config
from ingest.extract.landed import Landed
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.s3.changes import ListingDatabase
from ingest.s3.client import S3Connection
from ingest.s3.keys import RunClaims
from ingest.s3.scan import S3Run
from ingest.settings import Extracting, Settings
from ingest.storage.location import LakeLocation, LakeSession

T = TypeVar("T")

log = logging.getLogger(__name__)


class RunContext:
    """What one run holds open (see the module docstring). Thread-safe."""

    def __init__(
        self,
        settings: Settings,
        run_id: str,
        *,
        s3: S3Connection | None = None,
        pool: WorkerPool | None = None,
        lake: LakeSession | None = None,
    ) -> None:
        if lake is not None and lake.location != settings.location:
            raise ValueError(
                f"a session of the lake {lake.location} for a run on {settings.location}"
            )
        catalog.load()  # every table, in every process a run reaches (a Dask worker too)
        # A session handed in (a test's, a benchmark's) is its giver's to close.
        self._owns_lake = lake is None
        self.lake_session = lake if lake is not None else LakeSession(settings.location)
        self.settings = settings
        # Where the run's tables are, reached through the run's lake session.
        self.lake: LakeLocation = settings.location.bound(self.lake_session)
        # What the S3 source's listing and comparison read of the settings.
        self.s3_run = S3Run(self.lake, settings.s3, settings.downloads, settings.task_runner)
        self.run_id = run_id
        self.listing = ListingDatabase(self.lake_session.relations)
        self.claims = RunClaims()
        # what downloads settled from their first bytes, or started parsing, as files landed
        self.landed = Landed(
            parse_as_landed(settings.extracting, lambda: self.pool, self.extract_started)
        )
        self._s3 = s3
        self._owns_s3 = s3 is None  # a connection handed in is its giver's to close
        self._pools: dict[str, WorkerPool] = {}
        self._given = {"extract": pool} if pool is not None else {}  # their giver's to close
        self._extract_started: float | None = None
        self._once: dict[tuple[str, ...], Any] = {}
        self._closing: list[threading.Thread] = []  # pools closing in the background
        self._lock = threading.Lock()
        self._once_lock = threading.Lock()

    @property
    def s3(self) -> S3Connection:
        """The run's S3 connection: the one handed in, else one built from the settings on
        first use (a run that never reads a bucket opens none)."""
        with self._lock:
            if self._s3 is None:
                self._s3 = S3Connection.open(self.settings.s3)
            return self._s3

    @property
    def pool(self) -> WorkerPool:
        """The run's extraction pool (its workers start with the first job, or ``warm``)."""
        return self._pool("extract", pool_config)

    @property
    def ocr_pool(self) -> WorkerPool:
        """The run's OCR pool (its workers start with the first OCR job)."""
        return self._pool("ocr", ocr_pool_config)

    def _pool(self, name: str, config: Callable[[Extracting], PoolConfig]) -> WorkerPool:
        with self._lock:
            if name in self._given:
                return self._given[name]
            if name not in self._pools:
                self._pools[name] = WorkerPool(config(self.settings.extracting))
            return self._pools[name]

    def extract_started(self) -> float:
        """When this process started extracting for the run (monotonic seconds; the first
        call's time): the run's extraction budget counts from there."""
        with self._lock:
            if self._extract_started is None:
                self._extract_started = time.monotonic()
            return self._extract_started

    def once(self, key: tuple[str, ...], make: Callable[[], T]) -> T:
        """``make()`` the first time ``key`` is asked for in this run (here), then the same
        object: what a run works out once (its ids on the server, a progress bar's state)."""
        with self._once_lock:
            if key not in self._once:
                self._once[key] = make()
            return self._once[key]  # type: ignore[no-any-return]

    def work_done(self) -> None:
        """The run's listing is compared and its batches are done: the listing database
        closes (DuckDB's memory goes back before the commit), and the extraction pools
        close in the background (their processes' exit, ~0.2 s, overlaps the commit
        instead of following it); ``close`` waits for them."""
        self.listing.close()
        with self._lock:
            pools, self._pools = list(self._pools.values()), {}
        if pools:
            closing = threading.Thread(
                target=_close_all, args=(pools,), name="close-extraction-pools", daemon=True
            )
            closing.start()
            with self._lock:
                self._closing.append(closing)

    def close(self) -> None:
        """Close what the run opened: the listing database, its own lake session and S3
        connection, and its extraction pools."""
        self.listing.close()
        with self._lock:
            conn, self._s3 = (self._s3 if self._owns_s3 else None), None
            pools, self._pools = list(self._pools.values()), {}
            closing, self._closing = self._closing, []
        if conn is not None:
            conn.close()
        _close_all(pools)
        for thread in closing:
            thread.join()
        if self._owns_lake:
            self.lake_session.close()

    def __enter__(self) -> RunContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close_all(pools: list[WorkerPool]) -> None:
    for pool in pools:
        try:
            pool.close()
        except Exception:  # a pool that cannot stop cleanly must not hide the others
            log.exception("an extraction pool did not close cleanly")


_open: dict[str, RunContext] = {}
_open_lock = threading.Lock()


@contextmanager
def opened(
    settings: Settings,
    run_id: str,
    *,
    s3: S3Connection | None = None,
    pool: WorkerPool | None = None,
    lake: LakeSession | None = None,
) -> Iterator[RunContext]:
    """Open the context of run ``run_id`` for the ``with`` block (the flow's whole run),
    where this process's tasks of that run find it (``for_run``); closed at the end. A
    connection, pool or lake session handed in (``s3``, ``pool``, ``lake``: a test's, a
    benchmark's) is used and left open."""
    ctx = RunContext(settings, run_id, s3=s3, pool=pool, lake=lake)
    with _open_lock:
        if run_id in _open:
            raise RuntimeError(f"the context of run {run_id} is open already")
        _open[run_id] = ctx
    try:
        yield ctx
    finally:
        with _open_lock:
            _open.pop(run_id, None)
        ctx.close()


def for_run(settings: Settings, run_id: str, *, open_here: bool = False) -> RunContext:
    """The open context of run ``run_id`` in this process: the flow's (a task on its
    threads); else, with ``open_here`` (a task on a Dask worker), one opened here now from
    ``settings``, closed by ``close_run`` at the run's end. Without ``open_here`` a run
    with no open context here is an error: nothing would close what it opened."""
    with _open_lock:
        ctx = _open.get(run_id)
        if ctx is None:
            if not open_here:
                raise RuntimeError(
                    f"no open context for run {run_id} in this process: the flow opens it "
                    "(ingest.context.opened) around the tasks it runs"
                )
            ctx = _open[run_id] = RunContext(settings, run_id)
        return ctx


def lake_of(settings: Settings, run_id: str) -> LakeLocation:
    """The lake of run ``run_id``: its open context's here (bound to the run's lake
    session), else the settings' own, unbound (a call outside a run: each storage call
    then reaches the lake on its own)."""
    with _open_lock:
        ctx = _open.get(run_id)
    return ctx.lake if ctx is not None else settings.location


def open_runs() -> list[str]:
    """The runs whose context is open in this process."""
    with _open_lock:
        return sorted(_open)


def close_run(run_id: str) -> bool:
    """Close the context ``for_run`` opened for ``run_id`` in this process (a Dask
    worker's, at the run's end); whether there was one."""
    with _open_lock:
        ctx = _open.pop(run_id, None)
    if ctx is None:
        return False
    ctx.close()
    return True
