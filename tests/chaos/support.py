"""What every fault scenario shares: trial counts, the check against the source of
truth, and the record of each trial that ``make chaos`` turns into the table of
docs/reliability.md.

A scenario runs trials at seeded random points. ``make chaos`` sets
``CHAOS_FULL=1`` (every trial) and ``CHAOS_RESULTS`` (where the figures go);
``make test`` runs the short subset each scenario names (``quick``), with the same
seeds, so a failure there replays exactly under ``make chaos``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from ingest import storage
from ingest.s3.keys import TMP_DIR_NAME
from ingest.storage.lake import LAKE_DIR

FULL = os.environ.get("CHAOS_FULL") == "1"
SEED = int(os.environ.get("CHAOS_SEED", "20261130"))


def trials(full: int, quick: int) -> int:
    """How many trials a scenario runs: all of them under ``make chaos``."""
    return full if FULL else quick


def rng(name: str) -> random.Random:
    """The scenario's own seeded generator (same seed, same points, every run)."""
    return random.Random(f"{SEED}:{name}")


@dataclass
class Trial:
    """One trial: the faulty run, then the clean run, then the check."""

    fault: str
    point: str = ""
    ended_as_expected: bool = False
    lost: int = 0
    duplicates: int = 0
    partial: int = 0
    recover_seconds: float = 0.0
    note: str = ""
    stage: str = ""  # where the fault landed, for faults placed by stage


@dataclass
class Results:
    trials: list[Trial] = field(default_factory=list)

    def write(self, path: Path) -> None:
        old: dict[str, Any] = {}
        if path.exists():  # scenarios may run in several pytest sessions; merge by fault
            old = json.loads(path.read_text())
        faults = {t.fault for t in self.trials}
        kept = [t for t in old.get("trials", []) if t["fault"] not in faults]
        data = {
            "trials": kept + [asdict(t) for t in self.trials],
            "seed": SEED,
        }
        path.write_text(json.dumps(data, indent=1) + "\n")


RESULTS = Results()


def record(trial: Trial) -> Trial:
    RESULTS.trials.append(trial)
    return trial


@contextmanager
def timed() -> Iterator[list[float]]:
    box = [0.0]
    start = time.perf_counter()
    try:
        yield box
    finally:
        box[0] = time.perf_counter() - start


def md5(data: bytes) -> str:
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def bucket_contents(client: Any, bucket: str) -> dict[str, bytes]:
    """The source of truth: every object of the bucket, read straight from the server."""
    out: dict[str, bytes] = {}
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for o in page.get("Contents", []):
            if not o["Key"].endswith("/"):
                out[o["Key"]] = client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read()
    return out


def lake_problems(data_dir: Path) -> int:
    """Table files a reader would be sent to that are missing or unreadable."""
    bad = 0
    lake = data_dir / LAKE_DIR
    if not lake.exists():
        return 0
    for table in sorted(p.name for p in lake.iterdir() if (p / "_delta_log").is_dir()):
        for uri in storage.data_files(data_dir, table):
            path = Path(uri.removeprefix("file://"))
            try:
                pq.read_metadata(path)
            except Exception:
                bad += 1
    return bad


@dataclass
class S3Check:
    lost: int
    duplicates: int
    partial: int
    detail: str

    @property
    def clean(self) -> bool:
        return self.lost == self.duplicates == self.partial == 0


def check_s3(client: Any, bucket: str, data_dir: Path, *, documents: bool = False) -> S3Check:
    """Compare the stored objects with the bucket: every object present once, with its
    exact bytes; no stray or half-written file where users look; every table readable.

    ``documents`` also asks for one ``documents`` row per object.
    """
    truth = bucket_contents(client, bucket)
    root = data_dir / "objects" / bucket
    files = (
        {p.relative_to(root).as_posix(): p for p in root.rglob("*") if p.is_file()}
        if root.exists()
        else {}
    )
    stored = _rows(
        data_dir,
        f"SELECT key, status, local_path FROM s3_objects WHERE bucket = '{bucket}'",
    )
    by_key: dict[str, int] = {}
    for r in stored:
        by_key[r["key"]] = by_key.get(r["key"], 0) + 1
    ok = {r["key"] for r in stored if r["status"] == "downloaded"}
    lost = [k for k, body in truth.items() if k not in ok or _bytes(files.get(k)) != body]
    duplicates = sum(n - 1 for n in by_key.values())
    gone = {r["key"] for r in stored if r["status"] != "deleted"} - set(truth)
    duplicates += len(gone)  # a row for an object that no longer exists is one too many
    # A deleted object's file stays where it was (as ``aws s3 sync`` without --delete).
    deleted = {r["key"] for r in stored if r["status"] == "deleted"}
    stray = [
        k for k in files if k not in truth and k not in deleted and not k.startswith(TMP_DIR_NAME)
    ]
    partial = len(stray) + lake_problems(data_dir)
    if documents:
        docs = _rows(data_dir, f"SELECT key FROM documents WHERE bucket = '{bucket}'")
        keys = [d["key"] for d in docs]
        duplicates += len(keys) - len(set(keys))
        lost += [k for k in truth if k not in set(keys)]
    detail = f"lost {sorted(lost)[:5]} stray {stray[:5]} gone {sorted(gone)[:5]}"
    return S3Check(len(lost), duplicates, partial, detail)


def _bytes(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


def _rows(data_dir: Path, sql: str) -> list[dict[str, Any]]:
    columns, values = storage.query(data_dir, sql)
    return [dict(zip(columns, v, strict=True)) for v in values]


def leftover_tmp(root: Path) -> list[str]:
    """Files under the download root's temporary folder (swept by the next run)."""
    tmp = root / TMP_DIR_NAME
    return [p.name for p in tmp.rglob("*") if p.is_file()] if tmp.exists() else []


# ------------------------------------------------------- where a child run has got to


def finished(text: str, task: str) -> int:
    """Runs of ``task`` (a task name such as ``download-batch``) that a run's log shows
    finished (Prefect writes ``Task run 'download-batch-1a2' - Finished in state ...``)."""
    return len(re.findall(rf"Task run '{re.escape(task)}-[0-9a-f]+' - Finished in state", text))


def wait_for_log(proc: Any, log: Path, ready: Callable[[str], bool], timeout: float = 300) -> str:
    """Poll a child's log until ``ready(text)`` holds (an observable event in the run);
    the text seen then. Fails if the child exits first or the deadline passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if ready(text):
            return text
        if proc.poll() is not None:
            raise AssertionError(f"the run exited {proc.returncode} first:\n{text[-3000:]}")
        time.sleep(0.005)  # polling the log for the event, with a deadline
    raise AssertionError(f"not seen in {timeout} s:\n{log.read_text(errors='replace')[-3000:]}")
