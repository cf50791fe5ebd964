"""A run's staged rows, under ``<lake>/staging/<run_id>/<table>/<part>.parquet``.

Tasks of a run write their rows here as they finish (one small Parquet part per
batch, named by the batch so that a retried task overwrites its part instead of
adding one), and the run commits them to the lake at its end
(``ingest.storage.commit``): one commit per table per run, whatever the number
of batches. The staging area lives under the lake's root, so on object storage
(``s3://bucket/prefix/staging/...``) the run's end can commit parts that tasks
on other machines wrote. A part is written whole or not at all: one PUT on
object storage; on a local disk a hidden temporary name, synced, renamed
(``ingest.storage.durable``).

A running run touches ``heartbeat`` every few seconds; the staging of a run
whose heartbeat is older than ``stale_after`` belongs to a run that died
(killed, machine lost), and the next run commits it (``commit.recover``), so
nothing a killed run fetched is lost. Liveness is decided by that age alone
when the lake is on object storage (the heartbeat's writer may be another
machine, whose process ids mean nothing here); on a local lake a heartbeat
naming a process of this host that is gone also counts as dead at once.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import BotoCoreError, ClientError

from ingest import duck
from ingest.storage import evolve
from ingest.storage.location import DataDir, LocalFiles, files, locate
from ingest.storage.tables import SCHEMAS, evolving

log = logging.getLogger(__name__)

STAGING_DIR = "staging"
HEARTBEAT = "heartbeat"
HEARTBEAT_SECONDS = 10.0
_SAFE = re.compile(r"[^A-Za-z0-9._=-]")


def run_dir(data_dir: DataDir, run_id: str) -> Path:
    """The run's local working folder: its staging folder on a local lake; on object
    storage, a folder under local_dir for files that never leave this machine."""
    loc = locate(data_dir)
    return loc.local_dir / STAGING_DIR / safe_name(run_id)


def run_key(run_name: str) -> str:
    """The run's staging prefix under the lake's root."""
    return f"{STAGING_DIR}/{run_name}"


def safe_name(name: str) -> str:
    """A file name for a run id or part name (ids are UUIDs; anything else is escaped)."""
    cleaned = _SAFE.sub("_", name)
    return cleaned if cleaned not in ("", ".", "..") else f"_{cleaned}"


# The run's own records (its freshness, flow-run and timing rows) mark nothing as stored
# (ingest.storage.commit commits them last, in any order): a part of theirs lost to
# a power cut costs that record, never a row, so theirs are not synced to the disk before
# they are named. Every task ends by staging its timing: two syncs each (~10 ms on a cloud
# disk), on the path of every step that waits for a task.
RECORDS = ("source_freshness", "flow_runs", "task_timings")


def stage(
    data_dir: DataDir,
    run_id: str,
    table: str,
    part: str,
    rows: Sequence[Mapping[str, Any]] | pa.Table,
) -> str | None:
    """Write ``rows`` for ``table`` as the run's part ``part``, atomically.

    Returns the part's key under the lake's root, or None when there were no rows.
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
    key = f"{run_key(safe_name(run_id))}/{table}/{safe_name(part)}.parquet"
    sink = pa.BufferOutputStream()
    pq.write_table(batch, sink, compression="zstd")
    files(data_dir).put(key, sink.getvalue().to_pybytes(), sync=table not in RECORDS)
    return key


def parts(data_dir: DataDir, run_id: str, table: str) -> list[str]:
    """Keys of the run's complete parts of ``table`` (temporary files are not parts)."""
    prefix = f"{run_key(safe_name(run_id))}/{table}"
    return sorted(
        e.key
        for e in files(data_dir).entries(prefix)
        if e.key.endswith(".parquet")
        and not e.key.rsplit("/", 1)[-1].startswith(".")
        and e.key.count("/") == prefix.count("/") + 1
    )


def part_rows(data_dir: DataDir, key: str) -> int:
    """Rows of a part, from its footer (read alone on a local disk)."""
    lake_files = files(data_dir)
    if isinstance(lake_files, LocalFiles):
        return int(pq.read_metadata(lake_files.path(key)).num_rows)
    data = lake_files.get(key)  # a part is one batch's rows: small
    return int(pq.read_metadata(pa.BufferReader(data)).num_rows) if data else 0


def part_schema(data_dir: DataDir, key: str) -> pa.Schema | None:
    """A part's schema (with its metadata), from its footer: nothing decoded (None when the
    part is gone)."""
    lake_files = files(data_dir)
    if isinstance(lake_files, LocalFiles):
        try:
            return pq.read_schema(lake_files.path(key))
        except FileNotFoundError:
            return None
    data = lake_files.get(key)
    return pq.read_schema(pa.BufferReader(data)) if data else None


def read_part(data_dir: DataDir, key: str, columns: list[str] | None = None) -> pa.Table | None:
    """One part's rows (None when it is gone)."""
    data = files(data_dir).get(key)
    if data is None:
        return None
    # The file alone, not read_table's dataset machinery: half the time on a small part.
    return pq.ParquetFile(pa.BufferReader(data)).read(columns=columns)


def read_parts(data_dir: DataDir, keys: Sequence[str], table: str) -> pa.Table:
    """The rows of the parts ``keys``; a part that cannot be read is moved aside, never
    read again."""
    schema = SCHEMAS[table]
    resource = evolving(table)
    tables = []
    for key in keys:
        try:
            part = read_part(data_dir, key)
            if part is not None and resource:  # typed columns of their own: see evolve
                tables.append(part)
            elif part is not None:
                part = _with_columns(part, schema)
                tables.append(part if part.schema.equals(schema) else part.cast(schema))
        except (OSError, pa.ArrowException, ValueError) as exc:
            quarantine(data_dir, key, exc)
    if not tables:
        return schema.empty_table()
    return evolve.unify(tables, schema) if resource else pa.concat_tables(tables)


def scan_parts(data_dir: DataDir, run_id: str, table: str) -> str | None:
    """A ``SELECT`` over the run's staged parts of ``table`` for any library connection
    (``ingest.duck``), or None when there are none."""
    keys = parts(data_dir, run_id, table)
    if not keys:
        return None
    loc = locate(data_dir)
    if not loc.remote:
        listing = ", ".join(duck.sql_literal(loc.uri(k)) for k in keys)
        return f"SELECT * FROM read_parquet([{listing}], union_by_name = true)"
    rows = read_parts(loc, keys, table)
    name = loc.relations.register(f"staged:{loc.root}:{run_id}:{table}:{len(keys)}", rows)
    return f'SELECT * FROM "{name}"'


def _with_columns(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """Add the schema's columns a part staged before they existed lacks, as nulls."""
    for field in schema:
        if field.name not in rows.column_names:
            rows = rows.append_column(field, pa.nulls(rows.num_rows, field.type))
    return rows.select(schema.names)


def quarantine(data_dir: DataDir, key: str, exc: BaseException) -> None:
    """Move a file that is not a readable part out of the way (kept for a person to see)."""
    run, table, name = key.split("/")[-3:]
    target = f"{STAGING_DIR}/_quarantine/{run}-{table}-{name}"
    log.warning("staged part %s is unreadable (%s); moved to %s", key, exc, target)
    files(data_dir).move(key, target)


def staged_tables(data_dir: DataDir, run_id: str) -> list[str]:
    """Tables the run has staged parts for."""
    return [n for n in files(data_dir).children(run_key(safe_name(run_id))) if n in SCHEMAS]


def runs(data_dir: DataDir) -> list[str]:
    """Run folders present in staging (names as stored)."""
    return [n for n in files(data_dir).children(STAGING_DIR) if not n.startswith("_")]


def heartbeat_age(data_dir: DataDir, run_name: str) -> float:
    """Seconds since the run last touched its heartbeat (if it never did: since its
    folder was made on a local lake, since its newest part on object storage)."""
    lake_files = files(data_dir)
    for key in (f"{run_key(run_name)}/{HEARTBEAT}", run_key(run_name)):
        mtime = lake_files.mtime(key)
        if mtime is not None:
            return time.time() - mtime
    newest = max((e.mtime for e in lake_files.entries(run_key(run_name))), default=None)
    return float("inf") if newest is None else time.time() - newest


def touch(data_dir: DataDir, run_id: str) -> None:
    """Mark the run alive now; the file names its host and process."""
    key = f"{run_key(safe_name(run_id))}/{HEARTBEAT}"
    # a mark of a live process: after a power cut none is, so it needs no sync
    files(data_dir).put(key, f"{socket.gethostname()} {os.getpid()}".encode(), sync=False)


def owner_gone(data_dir: DataDir, run_name: str) -> bool:
    """True when the run's heartbeat names a process of this host that no longer exists
    (a run killed here is known dead at once, without waiting for its heartbeat to age).
    Never on object storage: the lake is shared, and another machine's process ids (or a
    container's reused host name) say nothing here; its heartbeat's age decides."""
    if locate(data_dir).remote:
        return False
    data = files(data_dir).get(f"{run_key(run_name)}/{HEARTBEAT}")
    try:
        host, pid = (data or b"").decode().split()
    except (UnicodeDecodeError, ValueError):
        return False
    return pid.isdigit() and process_gone(host, int(pid))


def process_gone(host: str, pid: int) -> bool:
    """True when ``host`` is this one and its process ``pid`` no longer exists (another
    host's process ids say nothing here; a process we may not signal is alive)."""
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


@contextmanager
def repeating(write: Callable[[], None], every: float, what: str, name: str) -> Iterator[None]:
    """Call ``write`` every ``every`` seconds on a thread ``name`` while the block runs; a
    write that fails (a full disk, a store's hiccup) is logged as ``what`` not written,
    and the next one is tried."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            try:
                write()
            except (OSError, BotoCoreError, ClientError) as exc:
                log.warning("%s not written: %s", what, exc)

    thread = threading.Thread(target=loop, name=name, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


@contextmanager
def heartbeat(data_dir: DataDir, run_id: str, every: float = HEARTBEAT_SECONDS) -> Iterator[None]:
    """Touch the run's heartbeat every ``every`` seconds while the block runs."""
    touch(data_dir, run_id)
    beat = partial(touch, data_dir, run_id)
    with repeating(beat, every, f"heartbeat of run {run_id}", f"heartbeat-{run_id}"):
        yield


def remove_run(data_dir: DataDir, run_name: str) -> None:
    """Remove the run's staging (and its local working folder)."""
    loc = locate(data_dir)
    if loc.remote:
        lake_files = files(loc)
        lake_files.delete([e.key for e in lake_files.entries(run_key(run_name))])
    shutil.rmtree(loc.local_dir / STAGING_DIR / run_name, ignore_errors=True)


def remove_parts(data_dir: DataDir, keys: Sequence[str]) -> None:
    files(data_dir).delete(list(keys))
