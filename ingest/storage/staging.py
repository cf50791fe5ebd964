"""A run's staged rows, under ``<data_dir>/staging/<run_id>/<table>/<part>.parquet``.

Tasks of a run write their rows here as they finish (one small Parquet part per
batch, named by the batch so that a retried task overwrites its part instead of
adding one), and the run commits them to the lake at its end
(``ingest.storage.commit``): one commit per table per run, whatever the number
of batches. A part is written under a hidden temporary name and renamed when
complete (synced before and after the rename, ``ingest.storage.durable``), so a
part that exists is whole, even after a power loss.

A running run touches ``heartbeat`` every few seconds; the staging folder of a
run whose heartbeat is older than ``stale_after`` belongs to a run that died
(killed, machine lost), and the next run commits it (``commit.recover``), so
nothing a killed run fetched is lost.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.storage import durable
from ingest.storage.tables import SCHEMAS

log = logging.getLogger(__name__)

STAGING_DIR = "staging"
HEARTBEAT = "heartbeat"
HEARTBEAT_SECONDS = 10.0
_SAFE = re.compile(r"[^A-Za-z0-9._=-]")


def run_dir(data_dir: Path, run_id: str) -> Path:
    return data_dir / STAGING_DIR / safe_name(run_id)


def safe_name(name: str) -> str:
    """A file name for a run id or part name (ids are UUIDs; anything else is escaped)."""
    cleaned = _SAFE.sub("_", name)
    return cleaned if cleaned not in ("", ".", "..") else f"_{cleaned}"


def stage(
    data_dir: Path,
    run_id: str,
    table: str,
    part: str,
    rows: Sequence[Mapping[str, Any]] | pa.Table,
) -> Path | None:
    """Write ``rows`` for ``table`` as the run's part ``part``, atomically.

    Returns the part's path, or None when there were no rows.
    """
    schema = SCHEMAS[table]
    if isinstance(rows, pa.Table):
        batch = rows
    else:
        if not rows:
            return None
        batch = pa.Table.from_pylist([dict(r) for r in rows], schema=schema)
    if batch.num_rows == 0:
        return None
    folder = run_dir(data_dir, run_id) / table
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{safe_name(part)}.parquet"
    tmp = folder / f".{safe_name(part)}.{uuid.uuid4().hex}.tmp"
    try:
        pq.write_table(batch, tmp, compression="zstd")
        durable.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def parts(data_dir: Path, run_id: str, table: str) -> list[Path]:
    """The run's complete parts of ``table`` (temporary files are not parts)."""
    folder = run_dir(data_dir, run_id) / table
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.parquet") if not p.name.startswith("."))


def read_parts(paths: Sequence[Path], table: str) -> pa.Table:
    """The rows of ``paths``; a part that cannot be read is moved aside, never read again."""
    schema = SCHEMAS[table]
    tables = []
    for path in paths:
        try:
            tables.append(pq.read_table(path).cast(schema))
        except (OSError, pa.ArrowException, ValueError) as exc:
            quarantine(path, exc)
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def quarantine(path: Path, exc: BaseException) -> None:
    """Move a file that is not a readable part out of the way (kept for a person to see)."""
    aside = path.parent.parent.parent / "_quarantine"
    aside.mkdir(parents=True, exist_ok=True)
    target = aside / f"{path.parent.parent.name}-{path.parent.name}-{path.name}"
    log.warning("staged part %s is unreadable (%s); moved to %s", path, exc, target)
    try:
        os.replace(path, target)
    except OSError:
        path.unlink(missing_ok=True)


def staged_tables(data_dir: Path, run_id: str) -> list[str]:
    """Tables the run has staged parts for."""
    folder = run_dir(data_dir, run_id)
    if not folder.is_dir():
        return []
    return [p.name for p in folder.iterdir() if p.is_dir() and p.name in SCHEMAS]


def runs(data_dir: Path) -> list[str]:
    """Run folders present in staging (names as on disk)."""
    folder = data_dir / STAGING_DIR
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("_"))


def heartbeat_age(data_dir: Path, run_name: str) -> float:
    """Seconds since the run last touched its heartbeat (its folder's age if it never did)."""
    folder = data_dir / STAGING_DIR / run_name
    for path in (folder / HEARTBEAT, folder):
        try:
            return time.time() - path.stat().st_mtime
        except OSError:
            continue
    return float("inf")


def touch(data_dir: Path, run_id: str) -> None:
    """Mark the run alive now; the file names its host and process."""
    folder = run_dir(data_dir, run_id)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / HEARTBEAT).write_text(f"{socket.gethostname()} {os.getpid()}")


def owner_gone(data_dir: Path, run_name: str) -> bool:
    """True when the run's heartbeat names a process of this host that no longer exists
    (a run killed here is known dead at once, without waiting for its heartbeat to age)."""
    try:
        host, pid = (data_dir / STAGING_DIR / run_name / HEARTBEAT).read_text().split()
    except (OSError, ValueError):
        return False
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextmanager
def heartbeat(data_dir: Path, run_id: str, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
    """Touch the run's heartbeat every ``every`` seconds while the block runs."""
    touch(data_dir, run_id)
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            try:
                touch(data_dir, run_id)
            except OSError as exc:  # a full disk must not kill the run from here
                log.warning("heartbeat of run %s not written: %s", run_id, exc)

    thread = threading.Thread(target=beat, name=f"heartbeat-{run_id}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def remove_run(data_dir: Path, run_name: str) -> None:
    shutil.rmtree(data_dir / STAGING_DIR / run_name, ignore_errors=True)


def remove_parts(paths: Sequence[Path]) -> None:
    for path in paths:
        path.unlink(missing_ok=True)
