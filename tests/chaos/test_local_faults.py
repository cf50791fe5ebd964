"""Faults of the machine the run is on: the disk filling up, corrupt or foreign files
in the data folder, the DuckDB warehouse held open by someone else, and the
extraction worker pool dying."""

from __future__ import annotations

import os
import re
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
from tests.chaos.support import (
    Trial,
    check_s3,
    finished,
    lake_problems,
    record,
    rng,
    timed,
    trials,
    wait_for_log,
)
from tests.helpers import ROOT, harness_api_url, put_many, rows

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


def descendants(pid: int, depth: int = 1) -> list[int]:
    """Processes under ``pid`` at least ``depth`` generations down (1: all of them)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [(pid, 0)]
    while todo:
        parent, level = todo.pop()
        for c in children.get(parent, []):
            if level + 1 >= depth:
                out.append(c)
            todo.append((c, level + 1))
    return out


@pytest.mark.timeout(1200)
def test_extraction_pool_dying(s3: Any, s3_server: Any, tmp_path: Path) -> None:
    """Every process under ``ingest s3`` (the fork server and its workers) is killed at a
    seeded moment while extraction runs: after the first download batch has finished
    (its ``extract-batch`` starts then) and before the last ``extract-batch`` finished.

    The bucket had a first run; since then 5 objects were deleted and 40 added, so the
    killed run has downloads, extraction and deletions to do. It must complete its
    downloads, mark the deletions, store its rows and summary; what it could not extract
    is extracted by the next run."""
    fault = "extraction worker pool killed"
    r = rng(fault)
    problems = []
    for i in range(trials(3, 0)):
        bucket = seed(s3, 20, words=3000)
        data_dir = tmp_path / f"t{i}"
        _, error = ingest(bucket, s3_server.url, data_dir)
        assert error is None, error
        gone = sorted(r.sample([f"d/{k:03d}.txt" for k in range(20)], 5))
        for key in gone:
            s3.delete_object(Bucket=bucket, Key=key)
        # 1.8 MB texts: ~0.3 s each to extract here, so extraction lasts seconds.
        put_many(s3, bucket, {f"e/{k:03d}.txt": text_for(bucket, k, 100000) for k in range(40)})
        batches = 40 // 5
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
                    *where(s3_server, data_dir),
                ],
                cwd=ROOT,
                env={
                    **os.environ,
                    "PREFECT_API_URL": harness_api_url(),
                    "INGEST_S3_BATCH_SIZE": "5",
                    "PYTHONUNBUFFERED": "1",
                },
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        # Extraction runs: a download batch is done (its extract-batch starts then) and a
        # pool worker is parsing.
        pid = proc.pid
        wait_for_log(
            proc, log, lambda t, pid=pid: finished(t, "download-batch") >= 1 and parsing(pid)
        )
        time.sleep(r.uniform(0.0, 0.1))  # the fault's random point, within the job
        killed = descendants(proc.pid)
        for child in killed:
            with suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)
        extracted_then = finished(log.read_text(errors="replace"), "extract-batch")
        code = proc.wait(300)
        output = log.read_text(errors="replace")
        # Jobs the kill interrupted: tried again on a fresh worker, or a row saying so.
        interrupted = output.count("its file is tried again")
        run_id = _run_id(output)
        docs = rows(data_dir, "SELECT status, count(*) n FROM documents GROUP BY ALL ORDER BY 1")
        stored = rows(data_dir, "SELECT status, count(*) n FROM s3_objects GROUP BY ALL")
        by_status = {x["status"]: x["n"] for x in stored}
        marked = rows(
            data_dir,
            "SELECT key FROM s3_objects WHERE status = 'deleted' ORDER BY key",
        )
        summary_row = rows(
            data_dir, f"SELECT count(*) n FROM flow_runs WHERE flow_run_id = '{run_id}'"
        )[0]["n"]
        not_ok = rows(
            data_dir, "SELECT count(*) n FROM documents WHERE status NOT IN ('ok', 'deleted')"
        )[0]["n"]
        missing = (
            55 - rows(data_dir, "SELECT count(*) n FROM documents WHERE status = 'ok'")[0]["n"]
        )
        during = extracted_then < batches and interrupted + not_ok > 0
        with timed() as took:
            again, again_error = ingest(bucket, s3_server.url, data_dir)
        ok_docs = rows(data_dir, "SELECT count(*) n FROM documents WHERE status = 'ok'")[0]["n"]
        retried = (
            rows(data_dir, f"SELECT count(*) n FROM documents WHERE run_id = '{again.run_id}'")[0][
                "n"
            ]
            if again is not None
            else -1
        )
        check = check_s3(s3, bucket, data_dir, documents=True)
        ended = (
            during
            and code == 0
            and by_status.get("downloaded") == 55
            and [m["key"] for m in marked] == gone
            and summary_row == 1
            and again_error is None
            and ok_docs == 55
            and retried == missing
        )
        trial = record(
            Trial(
                fault,
                point=f"{len(killed)} processes killed after {extracted_then} of {batches} "
                f"extract-batch runs; exit {code}",
                ended_as_expected=ended,
                lost=check.lost,
                duplicates=check.duplicates,
                partial=check.partial,
                recover_seconds=took[0],
                stage="extraction" if during else "not during extraction",
                note=f"{interrupted} interrupted jobs tried again in the run; documents "
                f"after it {docs}; the next run extracted {retried}",
            )
        )
        if not (ended and check.clean):
            problems.append((trial, check.detail, stored, marked, output[-1500:]))
    if not trials(3, 0):
        pytest.skip("runs under make chaos")
    assert not problems, problems


def parsing(pid: int) -> bool:
    """An extraction worker is parsing a document: a grandchild of the command (the fork
    server's child; the command's own children are the pools' fork servers) that is on the
    CPU (state R; a worker waiting for a job sleeps on its socket) and older than a
    worker's start-up (a few ms here; 1.5 s allowed)."""
    uptime = float(Path("/proc/uptime").read_text().split()[0])
    ticks = os.sysconf("SC_CLK_TCK")
    for worker in descendants(pid, depth=2):
        try:
            fields = Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] == "R" and uptime - int(fields[19]) / ticks >= 1.5:
            return True
    return False


def where(s3_server: Any, data_dir: Path) -> list[str]:
    return ["--endpoint-url", s3_server.url, "--data-dir", str(data_dir)]


def _run_id(output: str) -> str:
    found = re.search(r"^run ([0-9a-f-]{36}):", output, re.MULTILINE)
    return found.group(1) if found else ""
