"""The catalog of tables (``ingest.catalog``): each source's tables, handed to storage in
one explicit call. A dead run's staged rows of every source are recovered by a process
that loaded the catalog and imported none of the sources' writers; a process that never
loaded it refuses, and keeps the rows; the tables are the ones the single schema module
made before each source owned its own."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa

from ingest import catalog, storage
from ingest.storage import lake, staging
from ingest.storage.tables import SPECS

ROOT = Path(__file__).resolve().parents[3]
# What storage made of every table before the move (rendered by ``described`` on the
# commit before it): names, kinds, keys, partitioning and the Delta tables' columns.
BEFORE = ROOT / "tests" / "fixtures" / "table_schemas.txt"
NOW = datetime(2026, 12, 4, tzinfo=UTC)
# A row of a table of each source: S3, extraction, GitHub, a declared REST source's
# resource, the run history.
STAGED = {
    "s3_objects": {"bucket": "b", "key": "a.txt", "etag": "1", "ingested_at": NOW},
    "documents": {"bucket": "b", "key": "a.txt", "etag": "1", "extracted_at": NOW},
    "pull_requests": {"repo": "octo/r", "number": 7, "title": "t", "fetched_at": NOW},
    "shop__orders": {"key": "o1", "source": "shop", "resource": "orders", "data": "{}"},
    "flow_runs": {"flow_run_id": "f1", "state": "COMPLETED", "ended_at": NOW},
    "task_timings": {"flow_run_id": "f1", "task_name": "t", "started_at": NOW},
}
# The modules that write these tables in a run: the recovering process imports none.
WRITERS = (
    "ingest.s3.sync",
    "ingest.s3.scan",
    "ingest.extract.structure",
    "ingest.rest.store",
    "ingest.report.history",
    "ingest.report.timing",
    "ingest.context",
)


def described(data_dir: Path) -> str:
    """Every table of the catalog (and a REST resource's) as storage creates it."""
    out = []
    for name in [*sorted(t.name for t in catalog.TABLES), "shop__orders"]:
        s = SPECS[name]
        dt = lake.ensure_table(data_dir, name)
        parts = ",".join(dt.metadata().partition_columns)
        out.append(
            f"{name} {s.kind} keys={','.join(s.keys)} newer={s.newer} day_from={s.day_from} "
            f"log={s.log} sort={','.join(s.sort)} parts={s.parts} partition_by={parts}"
        )
        out += [
            f"    {f.name} {f.type} {'null' if f.nullable else 'not null'}"
            for f in pa.schema(dt.schema().to_arrow())
        ]
    return "\n".join(out) + "\n"


def test_the_tables_are_the_ones_made_before_each_source_owned_its_schemas(
    tmp_path: Path,
) -> None:
    assert described(tmp_path) == BEFORE.read_text()


def stage_a_dead_run(data_dir: Path) -> None:
    for table, row in STAGED.items():
        storage.stage(data_dir, "dead", table, "p", [row])
    old = datetime.now().timestamp() - 3600
    os.utime(staging.run_dir(data_dir, "dead"), (old, old))


def recover_in_a_fresh_process(data_dir: Path, load: bool) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "from ingest import catalog, storage\n"
        f"{'catalog.load()' if load else ''}\n"
        "print(storage.prepare(sys.argv[1], stale_after=60))\n"
        f"print([m for m in {WRITERS!r} if m in sys.modules])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(data_dir)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_process_that_loads_only_the_catalog_recovers_every_sources_staged_rows(
    tmp_path: Path,
) -> None:
    stage_a_dead_run(tmp_path)
    child = recover_in_a_fresh_process(tmp_path, load=True)
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["['dead']", "[]"]
    for table in STAGED:
        assert storage.query(tmp_path, f"SELECT count(*) FROM {table}")[1] == [(1,)], table
    assert storage.query(tmp_path, "SELECT number FROM pull_request_log")[1] == [(7,)]
    assert staging.runs(tmp_path) == []


def test_a_process_that_never_loaded_the_catalog_refuses_and_keeps_the_rows(
    tmp_path: Path,
) -> None:
    """Importing the catalog fills nothing: only ``load`` does."""
    stage_a_dead_run(tmp_path)
    child = recover_in_a_fresh_process(tmp_path, load=False)
    assert child.returncode == 1
    assert child.stderr.strip().splitlines()[-1] == (
        "ingest.storage.tables.CatalogNotLoadedError: "
        "the table catalog is not loaded: call ingest.catalog.load() first"
    )
    assert staging.runs(tmp_path) == ["dead"]
    assert sorted(staging.staged_tables(tmp_path, "dead")) == sorted(STAGED)
    assert lake.open_table(tmp_path, "s3_objects") is None
