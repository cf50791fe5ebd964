"""Leases on a run's target: one run at a time ingests one bucket and prefix into a lake.

Two ``ingest s3`` runs on the same target and lake both used to list, download and
extract everything (their results were correct, the work doubled). A run now takes
the target's lease first, ``staging/_leases/<target hash>``, created only if absent
(a hard link on a local disk, a conditional PUT on object storage: the same atomic
create the commits rely on). The lease names its run, host and process, and its
holder rewrites it every few seconds while it runs. A lease older than
``stale_after``, or, on a local lake, naming a process of this host that is gone,
belongs to a run that died: the next run takes it over.

What a run does when another holds its target is a setting
(``INGEST_S3_SAME_TARGET``): ``wait`` until the other ends (the default: then the run
finds the other's work stored and skips it), ``skip`` the run with a message, or
``run`` anyway (both do all the work, as before).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal

from ingest.storage.location import DataDir, files, locate
from ingest.storage.staging import HEARTBEAT_SECONDS, STAGING_DIR, process_gone, repeating

log = logging.getLogger(__name__)

LEASES = f"{STAGING_DIR}/_leases"
SameTarget = Literal["wait", "skip", "run"]
# How often a waiting run looks at the lease again (a file read; the holder's end is
# not announced otherwise on object storage).
POLL_SECONDS = 1.0
DEFAULT_STALE = 300.0  # Settings.staging_stale_after's default


@dataclass(frozen=True, slots=True)
class Holder:
    """The run that holds a target's lease."""

    run_id: str
    host: str
    pid: int
    target: str

    def describe(self) -> str:
        return (
            f"run {self.run_id} (host {self.host}, process {self.pid}) is ingesting "
            f"{self.target} into this lake"
        )


def lease_key(target: str) -> str:
    return f"{LEASES}/{hashlib.sha256(target.encode()).hexdigest()[:32]}.json"


def _body(run_id: str, target: str) -> bytes:
    return json.dumps(
        {"run_id": run_id, "host": socket.gethostname(), "pid": os.getpid(), "target": target}
    ).encode()


def holder(data_dir: DataDir, target: str, stale_after: float = DEFAULT_STALE) -> Holder | None:
    """The live holder of ``target``'s lease, or None (no lease, or its run died)."""
    key = lease_key(target)
    lake_files = files(data_dir)
    data = lake_files.get(key)
    if data is None:
        return None
    try:
        raw: dict[str, Any] = json.loads(data)
        found = Holder(str(raw["run_id"]), str(raw["host"]), int(raw["pid"]), str(raw["target"]))
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: nobody can be waited for
    return None if _dead(data_dir, key, found, stale_after) else found


def _dead(data_dir: DataDir, key: str, found: Holder, stale_after: float) -> bool:
    mtime = files(data_dir).mtime(key)
    if mtime is None:
        return True
    if time.time() - mtime > stale_after:
        return True
    # on object storage another machine's process ids say nothing here: the age decides
    return not locate(data_dir).remote and process_gone(found.host, found.pid)


def try_take(
    data_dir: DataDir, target: str, run_id: str, stale_after: float = DEFAULT_STALE
) -> Holder | None:
    """Take ``target``'s lease for ``run_id``; returns None when taken, else the live
    holder. A dead holder's lease is removed and taken over."""
    key = lease_key(target)
    lake_files = files(data_dir)
    for _ in range(3):  # a dead lease removed, then a race with another run for it
        if lake_files.create(key, _body(run_id, target)):
            return None
        found = holder(data_dir, target, stale_after)
        if found is not None:
            return None if found.run_id == run_id else found
        log.info("lease of %s belonged to a run that died; taking it over", target)
        lake_files.delete([key])
    found = holder(data_dir, target, stale_after)
    return None if found is None or found.run_id == run_id else found


def release(data_dir: DataDir, target: str, run_id: str) -> None:
    """Give the lease back (only this run's own)."""
    key = lease_key(target)
    lake_files = files(data_dir)
    data = lake_files.get(key)
    try:
        mine = data is not None and json.loads(data).get("run_id") == run_id
    except ValueError:
        mine = False
    if mine:
        lake_files.delete([key])


@contextmanager
def hold(
    data_dir: DataDir,
    target: str,
    run_id: str,
    *,
    when_held: SameTarget = "wait",
    stale_after: float = DEFAULT_STALE,
    on_wait: Callable[[Holder], None] | None = None,
    every: float = HEARTBEAT_SECONDS,
) -> Iterator[Holder | None]:
    """Hold ``target``'s lease while the block runs (renewed every ``every`` seconds);
    the block gets None, or, with ``skip``, the live holder it did not wait for (then
    nothing is held: the block is expected to end at once).

    Another live holder: ``wait`` polls until it ends (``on_wait`` is told once, with
    the holder), ``skip`` hands it to the block, ``run`` goes on without the lease.
    """
    if when_held == "run":
        yield None
        return
    told = False
    while (other := try_take(data_dir, target, run_id, stale_after)) is not None:
        if when_held == "skip":
            yield other
            return
        if not told and on_wait is not None:
            on_wait(other)
            told = True
        time.sleep(POLL_SECONDS)  # polling another process's lease, not synchronising ours
    renew = partial(files(data_dir).put, lease_key(target), _body(run_id, target))
    try:
        with repeating(renew, every, f"lease of {target}", f"lease-{run_id}"):
            yield None
    finally:
        release(data_dir, target, run_id)
