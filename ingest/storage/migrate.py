"""One-time migration of a data folder from the Parquet-folder layout to the lake.

The first layout kept every run's rows as ``tables/<table>/<run>/<part>.parquet``
and deduplicated at read time. ``migrate`` reads each old table once, MERGEs
the latest row per key into the state tables and appends every row to the
history tables (a row per skipped object is dropped from the log: skips are no
longer logged), then renames ``tables/`` to ``tables.migrated/`` so it is
never read again and can be deleted by hand. A lock file keeps two processes
from migrating at once; a crash part-way is finished by the next call (MERGEs
and the app-transaction-guarded appends are idempotent).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from ingest import duck
from ingest.storage import lake
from ingest.storage.location import DataDir, locate
from ingest.storage.tables import SPECS

log = logging.getLogger(__name__)

OLD_DIR = "tables"
DONE_DIR = "tables.migrated"


def needs_migration(data_dir: DataDir) -> bool:
    """An old ``tables/`` folder exists (only a local data folder ever had one)."""
    loc = locate(data_dir)
    return not loc.remote and (Path(loc.root) / OLD_DIR).is_dir()


def migrate(data_dir: Path) -> dict[str, int]:
    """Move an old ``tables/`` folder into the lake; returns rows per table moved."""
    old = data_dir / OLD_DIR
    if not old.is_dir():
        return {}
    lock = data_dir / ".migrating"
    try:
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        if time.time() - lock.stat().st_mtime < 600:
            raise RuntimeError(
                f"{data_dir} is being migrated by another process; if none runs, delete {lock}"
            ) from None
        lock.unlink(missing_ok=True)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    os.close(fd)
    moved: dict[str, int] = {}
    try:
        log.warning("migrating %s from Parquet folders to Delta tables (once)", old)
        for folder in sorted(p for p in old.iterdir() if p.is_dir()):
            table = folder.name
            if table not in SPECS:
                continue
            files = [
                str(p)
                for p in folder.glob("*/*.parquet")
                if not p.name.startswith(".") and p.name != "_schema.parquet"
            ]
            if not files:
                continue
            with duck.connect() as con:
                rows = con.execute(
                    "SELECT * FROM read_parquet(?, union_by_name = true)", [files]
                ).fetch_arrow_table()
            spec = SPECS[table]
            txn = (f"ingest:migration:{table}", 1)
            if spec.kind == "state":
                lake.merge(data_dir, table, rows)
                if spec.log:
                    log_rows = rows
                    if "status" in rows.column_names and table == "s3_objects":
                        import pyarrow.compute as pc

                        log_rows = rows.filter(pc.not_equal(rows.column("status"), "skipped"))
                    lake.append(data_dir, spec.log, log_rows, txn=txn)
            else:
                lake.append(data_dir, table, rows, txn=txn)
            moved[table] = rows.num_rows
        target = data_dir / DONE_DIR
        if target.exists():
            target = data_dir / f"{DONE_DIR}-{int(time.time())}"
        os.replace(old, target)
        log.warning("migration done: %s; the old files are in %s (safe to delete)", moved, target)
        return moved
    finally:
        lock.unlink(missing_ok=True)
