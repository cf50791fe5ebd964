"""Files whose first bytes decide their row (empty, unsupported, a DWG of R12 or older) are
settled in the flow's process, with the row a worker would have written; everything else
still goes to the workers."""

from __future__ import annotations

import os
import random
import zipfile
from pathlib import Path

import pytest

from ingest.extract import extract_by_head, extract_document
from ingest.extract.batch import extract_batch
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings
from tests.extract_support import FIXTURES


def generated(tmp_path: Path) -> list[Path]:
    """Edge cases beside the shared fixtures: each decided by its head, or not."""
    files = {
        "random.bin": os.urandom(20_000),
        "empty.docx": b"",
        "zero.pdf": b"",
        "drawing.dwg": b"AC1009" + os.urandom(5_000),  # R12: refused by its version
        "damaged.dwg": b"AC1032" + os.urandom(5_000),  # R2018 to ezdwg, which fails it
        "fake.pdf": os.urandom(3_000),  # a claimed PDF whose bytes are not one
        "image.png": b"\x89PNG\r\n\x1a\n" + os.urandom(1_000),
        "note.txt": b"plain words, nothing else\n" * 10,
        "page.html": b"<!doctype html><html><body><p>hi</p></body></html>",
        "real.pdf": b"%PDF-1.4\n" + os.urandom(100),
    }
    paths = []
    for name, data in files.items():
        p = tmp_path / name
        p.write_bytes(data)
        paths.append(p)
    z = tmp_path / "archive.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("a.txt", "not a document package")
    return [*paths, z]


def candidates(tmp_path: Path) -> list[Path]:
    shared = sorted(p for p in FIXTURES.glob("*") if p.name != "MANIFEST.tsv")
    return [*shared, *generated(tmp_path)]


def test_a_head_decision_is_the_row_the_worker_would_write(tmp_path: Path) -> None:
    decided = 0
    for path in candidates(tmp_path):
        by_head = extract_by_head(path, path.name)
        if by_head is None:
            continue
        decided += 1
        full = extract_document(path, path.name)
        assert (by_head.kind, by_head.status, by_head.error, by_head.text) == (
            full.kind,
            full.status,
            full.error,
            full.text,
        ), path.name
    assert decided >= 5  # the generated empties, random bytes, DWG, PNG (and fixtures)


@pytest.mark.parametrize(
    ("name", "decided"),
    [
        ("random.bin", True),
        ("empty.docx", True),
        ("drawing.dwg", True),
        ("damaged.dwg", False),  # a readable version: ezdwg reads it in a worker
        ("image.png", True),
        ("fake.pdf", False),  # its parser says why it is not a PDF
        ("note.txt", False),  # text is cleaned by the worker
        ("page.html", False),
        ("real.pdf", False),
        ("archive.zip", False),  # DOCX or not is told from the whole package
    ],
)
def test_only_what_the_head_decides_is_settled(tmp_path: Path, name: str, decided: bool) -> None:
    generated(tmp_path)
    assert (extract_by_head(tmp_path / name, name) is not None) is decided


def test_a_missing_file_is_left_to_the_worker(tmp_path: Path) -> None:
    assert extract_by_head(tmp_path / "gone.bin", "gone.bin") is None


def test_a_batch_sends_only_parsed_files_to_the_workers(tmp_path: Path) -> None:
    files = generated(tmp_path)
    stored = [(p.name, f"etag-{i}", str(p)) for i, p in enumerate(files)]
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        docs = extract_batch(Settings().extracting, "b", stored, run_id="r", pool=pool)
        jobs = pool.stats.jobs
    by_key = {d.key: d for d in docs}
    assert [d.key for d in docs] == [p.name for p in files]  # one row each, in order
    assert by_key["random.bin"].status == "unsupported"
    assert by_key["drawing.dwg"].status == "unsupported"
    assert by_key["drawing.dwg"].error == (
        "DWG R12 (AC1009): not readable; save it as DXF or a newer DWG"
    )
    assert by_key["damaged.dwg"].status == "failed"
    assert (by_key["damaged.dwg"].error or "").startswith("unreadable DWG: ")
    assert by_key["empty.docx"].status == "empty"
    assert by_key["note.txt"].status == "ok"
    assert by_key["fake.pdf"].status == "failed"
    parsed = sum(extract_by_head(p, p.name) is None for p in files)
    assert jobs == parsed < len(files)


def test_a_batch_of_unsupported_files_starts_no_worker(tmp_path: Path) -> None:
    stored = []
    for i in range(20):
        p = tmp_path / f"blob-{i}.bin"
        # Seeded: a random head starts with a UTF-16 BOM, or has all its NULs on one side,
        # about once in a thousand (text, for a worker to read), and this test is of bytes
        # that are not a document.
        p.write_bytes(random.Random(i).randbytes(4_000))
        stored.append((p.name, f"e{i}", str(p)))
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        docs = extract_batch(Settings().extracting, "b", stored, run_id="r", pool=pool)
        assert (pool.stats.started, pool.stats.jobs) == (0, 0)
    assert {d.status for d in docs} == {"unsupported"}
