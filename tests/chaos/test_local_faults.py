"""Faults of the machine the run is on: the disk filling up, corrupt or foreign files
in the data folder, the DuckDB warehouse held open by someone else, and the
extraction worker pool dying."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flows.s3_ingest import s3_ingest
from ingest.storage.lake import LAKE_DIR
from tests.chaos.support import Trial, check_s3, lake_problems, record, rng, timed, trials
from tests.helpers import ROOT, put_many, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def text_for(bucket: str, i: int, words: int = 300) -> bytes:
    return (f"{bucket} document {i} " + "section elevation " * words).encode()


def seed(s3: Any, n: int, words: int = 300) -> str:
    bucket = f"local-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    put_many(s3, bucket, {f"d/{i:03d}.txt": text_for(bucket, i, words) for i in range(n)})
    return bucket


def ingest(bucket: str, url: str, data_dir: Path, **kw: Any) -> tuple[Any, BaseException | None]:
    try:
        return s3_ingest(bucket=bucket, endpoint_url=url, data_dir=str(data_dir), **kw), None
    except Exception as exc:
        return None, exc


# ------------------------------------------------------------------------ disk full


@contextmanager
def small_disk(path: Path, size_kb: int) -> Iterator[Path]:
    """A size-limited tmpfs at ``path`` (needs root); remounted larger by ``grow``."""
    path.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(path)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def grow(path: Path, size_kb: int) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size_kb}k", str(path)], check=True)


@pytest.mark.timeout(1200)
@pytest.mark.parametrize("where", ["downloading", "writing tables"])
def test_disk_full_then_space_again(where: str, s3: Any, s3_server: Any, tmp_path: Path) -> None:
    """The data folder on a small tmpfs whose size is the seeded trial point: the disk
    fills while objects download (small sizes) or once they are down and the tables
    are written (sizes a little above the objects)."""
    fault = f"disk full while {where}"
    r = rng(fault)
    n_objects, objects_kb = 40, 40 * 11
    problems = []
    for i in range(trials(3, 1 if where == "writing tables" else 0) or 0):
        size = (
            r.randrange(64, objects_kb)
            if where == "downloading"
            else r.randrange(objects_kb + 40, objects_kb + 400)
        )
        bucket = seed(s3, n_objects)
        with small_disk(tmp_path / f"disk{i}", size) as data_dir:
            summary, error = ingest(bucket, s3_server.url, data_dir)
            message = str(error or (summary and summary.failures[:1]) or "")
            unreadable = lake_problems(data_dir)
            grow(data_dir, 65536)
            with timed() as took:
                _again, again_error = ingest(bucket, s3_server.url, data_dir)
            check = check_s3(s3, bucket, data_dir, documents=True)
        named = "No space left" in message or "ENOSPC" in message or "space" in message.lower()
        ended = (error is not None or summary.failed > 0) and named and again_error is None
        trial = record(
            Trial(
                fault,
                point=f"{size} KB disk",
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial + unreadable,
                recover_seconds=took[0],
                note=message[:200],
            )
        )
        if not (ended and check.clean and not unreadable):
            problems.append((trial, check.detail, repr(again_error)[:300]))
    if not problems and not trials(3, 1 if where == "writing tables" else 0):
        pytest.skip("runs under make chaos")
    assert not problems, problems


# ------------------------------------------------------------- corrupt or foreign files


def plant(data_dir: Path, r: Any) -> str:
    """One corrupt, truncated or foreign file at a seeded place in the data folder."""
    lake = data_dir / LAKE_DIR
    tables = sorted(p for p in lake.iterdir() if (p / "_delta_log").is_dir())
    table = r.choice(tables)
    real = sorted(table.rglob("*.parquet"))
    where = r.choice(
        [
            table / f"part-00000-{uuid.uuid4()}-c000.snappy.parquet",
            table / "notes.txt",
            table / "_delta_log" / "README",
            data_dir / "staging" / "someone-else" / "s3_objects" / "b0.parquet",
            data_dir / "staging" / "_quarantine" / "x.parquet",
            data_dir / "warehouse.duckdb",
        ]
    )
    kind = r.choice(["truncated", "random bytes", "empty", "foreign parquet"])
    where.parent.mkdir(parents=True, exist_ok=True)
    if kind == "truncated" and real:
        data = real[0].read_bytes()
        where.write_bytes(data[: len(data) // 2])
    elif kind == "foreign parquet":
        pq.write_table(pa.table({"x": [1, 2, 3]}), where)
    elif kind == "empty":
        where.write_bytes(b"")
    else:
        where.write_bytes(os.urandom(5000))
    return f"{kind} at {where.relative_to(data_dir)}"


@pytest.mark.timeout(1200)
def test_corrupt_or_foreign_file_in_the_data_folder(
    s3: Any, s3_server: Any, tmp_path: Path
) -> None:
    fault = "corrupt, truncated or foreign file in the data folder"
    r = rng(fault)
    problems = []
    for i in range(trials(6, 1)):
        bucket = seed(s3, 12, words=50)
        data_dir = tmp_path / f"t{i}"
        _, error = ingest(bucket, s3_server.url, data_dir)
        assert error is None, error
        point = plant(data_dir, r)
        s3.put_object(Bucket=bucket, Key="d/new.txt", Body=text_for(bucket, 999, 50))
        s3.delete_object(Bucket=bucket, Key="d/000.txt")
        with timed() as took:
            _again, again_error = ingest(bucket, s3_server.url, data_dir)
        check = check_s3(s3, bucket, data_dir, documents=False)
        answered = rows(data_dir, "SELECT count(*) n FROM s3_objects WHERE status = 'downloaded'")
        ended = again_error is None and answered[0]["n"] == 12
        trial = record(
            Trial(
                fault,
                point=point,
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial,
                recover_seconds=took[0],
                note=repr(again_error)[:200] if again_error else "",
            )
        )
        if not (ended and check.clean):
            problems.append((trial, check.detail))
    assert not problems, problems


# ------------------------------------------------------------- warehouse held open


HOLD = """
import sys, time, duckdb
con = duckdb.connect(sys.argv[1])  # read-write, as the stock CLI opens it
print("held", flush=True)
sys.stdin.read()
"""


@pytest.mark.timeout(600)
def test_warehouse_held_open_read_write(s3: Any, s3_server: Any, tmp_path: Path) -> None:
    fault = "warehouse.duckdb held open read-write"
    problems = []
    for i in range(trials(3, 1)):
        bucket = seed(s3, 10, words=30)
        data_dir = tmp_path / f"t{i}"
        data_dir.mkdir()
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLD, str(data_dir / "warehouse.duckdb")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        try:
            _summary, error = ingest(bucket, s3_server.url, data_dir)
            stored = rows(data_dir, "SELECT count(*) n FROM s3_objects")[0]["n"]
        finally:
            holder.communicate("")
        with timed() as took:
            s3.put_object(Bucket=bucket, Key="d/later.txt", Body=b"later")
            _again, again_error = ingest(bucket, s3_server.url, data_dir)
        with duckdb.connect(str(data_dir / "warehouse.duckdb"), read_only=True) as con:
            in_warehouse = con.sql("SELECT count(*) FROM s3_objects").fetchone()[0]  # type: ignore[index]
        check = check_s3(s3, bucket, data_dir, documents=True)
        ended = error is None and stored == 10 and again_error is None and in_warehouse == 11
        trial = record(
            Trial(
                fault,
                point="held for the whole run",
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial,
                recover_seconds=took[0],
                note=f"{error!r}"[:200] if error else "",
            )
        )
        if not (ended and check.clean):
            problems.append((trial, check.detail, stored, in_warehouse))
    assert not problems, problems


# ------------------------------------------------------------- extraction pool dying


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


@pytest.mark.timeout(1200)
def test_extraction_pool_dying(s3: Any, s3_server: Any, tmp_path: Path) -> None:
    """Every process under ``ingest s3`` (the fork server and its workers) is killed at
    a seeded moment once extraction has begun."""
    from prefect.settings import PREFECT_API_URL

    fault = "extraction worker pool killed"
    r = rng(fault)
    problems = []
    for i in range(trials(3, 0)):
        bucket = seed(s3, 40, words=3000)
        data_dir = tmp_path / f"t{i}"
        log = tmp_path / f"t{i}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "cli.main",
                    "s3",
                    "--bucket",
                    bucket,
                    "--endpoint-url",
                    s3_server.url,
                    "--data-dir",
                    str(data_dir),
                ],
                cwd=ROOT,
                env={
                    **os.environ,
                    "PREFECT_API_URL": str(PREFECT_API_URL.value()),
                    "INGEST_S3_BATCH_SIZE": "5",
                },
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 120
        while not descendants(proc.pid) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)  # polling for the pool's processes to appear
        time.sleep(r.uniform(0.0, 3.0))  # the fault's random point
        killed = descendants(proc.pid)
        for pid in killed:
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        code = proc.wait(300)
        output = log.read_text(errors="replace")
        docs = rows(data_dir, "SELECT status, count(*) n FROM documents GROUP BY ALL")
        stored = rows(data_dir, "SELECT count(*) n FROM s3_objects WHERE status = 'downloaded'")
        with timed() as took:
            _again, again_error = ingest(bucket, s3_server.url, data_dir)
        ok_docs = rows(data_dir, "SELECT count(*) n FROM documents WHERE status = 'ok'")[0]["n"]
        check = check_s3(s3, bucket, data_dir, documents=True)
        ended = code == 0 and stored[0]["n"] == 40 and again_error is None and ok_docs == 40
        trial = record(
            Trial(
                fault,
                point=f"{len(killed)} processes killed; exit {code}; documents {docs}",
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial,
                recover_seconds=took[0],
                note=output.strip().splitlines()[-1][:200] if output.strip() else "",
            )
        )
        if not (ended and check.clean):
            problems.append((trial, check.detail, stored, ok_docs, output[-1500:]))
    if not trials(3, 0):
        pytest.skip("runs under make chaos")
    assert not problems, problems
