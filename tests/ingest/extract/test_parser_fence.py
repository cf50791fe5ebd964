"""A parser cannot read what its worker's user can: the Landlock fence of the pool's workers.

The review's probe: a job in the pool read the user's credential files. Each worker of a
pool given ``read_roots`` (every run's pool is: ``ingest.extract.batch.pool_config``)
fences itself after its imports and before its first job (``ingest.extract.fence``). A
real worker is handed a job that does what a hostile document's parser would: open the
credential files of its home, a file beside the folder it was given, write outside its
scratch folder, connect to a port on loopback. The same job in a pool without the fence
does all of it: that is the hole. The shared fixture documents extract exactly as
without the fence, the lazily imported parsers (ezdxf, python-docx, pdfminer.six) and
the DWG reader's temporary files included.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.extract import fence
from ingest.extract.batch import extract_batch, parser_roots, pool_config
from ingest.extract.ocr import ocr_unavailable
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings
from tests.extract_support import FIXTURES

REACH = "tests.extract_support:reach"
SECRETS = {  # fake, each where a worker's user keeps it
    "~/.aws/credentials": "[default]\naws_secret_access_key = aws-secret-in-home-0123",
    "~/.prefect/profiles.toml": '[profiles.default]\nPREFECT_API_AUTH_STRING = "admin:pw"',
    "~/.config/gh/hosts.yml": "github.com:\n    oauth_token: gho_token_in_home_0123",
}

needs_landlock = pytest.mark.skipif(
    fence.landlock_abi() < 1, reason="this kernel has no Landlock: the workers run unfenced"
)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A home with the credential files the review read (the workers keep ``HOME``)."""
    home = tmp_path / "home"
    for name, text in SECRETS.items():
        path = home / name.removeprefix("~/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port on loopback that accepts connections."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server.getsockname()[1]


def probe(config: PoolConfig, reads: list[str], writes: list[str], port: int) -> dict[str, str]:
    with WorkerPool(config) as pool:
        outcome = pool.submit(REACH, reads, writes, port).result()
    assert outcome.status == "ok", outcome.error
    return outcome.value


@needs_landlock
def test_a_fenced_parser_reads_only_what_it_was_given(
    tmp_path: Path, home: Path, listener: int
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("the document")
    beside = tmp_path / "database-url"  # beside the download folder, as a secret file may be
    beside.write_text("postgresql://ingest:db-password@db/prefect")
    elsewhere = [p for p in ("/etc/hostname", "/etc/hosts") if Path(p).is_file()]
    environ = f"/proc/{os.getpid()}/environ"  # this process: dumpable, the same user
    reads = [*SECRETS, str(beside), *elsewhere, environ, str(docs / "a.txt")]
    writes = [str(docs / "planted.txt"), "~/.bashrc", "$TMPDIR/scratch.txt"]

    unfenced = probe(PoolConfig(workers=1), reads, writes, listener)
    assert all(unfenced[name] == f"read: {text}" for name, text in SECRETS.items())  # the hole
    assert unfenced[str(beside)].startswith("read: ")
    assert unfenced[environ].startswith("read: ")
    assert unfenced["connect"] == "connected"
    for path in (docs / "planted.txt", home / ".bashrc"):
        path.unlink()

    fenced = probe(PoolConfig(workers=1, read_roots=(str(docs),)), reads, writes, listener)
    for name in (*SECRETS, str(beside), *elsewhere, environ):
        assert fenced[name] == "refused: PermissionError", name
    assert fenced[str(docs / "a.txt")] == "read: the document"  # the file it is handed
    assert fenced[str(docs / "planted.txt")] == "refused: PermissionError"
    assert fenced["~/.bashrc"] == "refused: PermissionError"
    assert fenced["$TMPDIR/scratch.txt"] == "wrote"  # its own scratch folder
    assert not (docs / "planted.txt").exists() and not (home / ".bashrc").exists()
    if fence.landlock_abi() >= 4:
        assert fenced["connect"] == "refused: PermissionError"
    else:
        assert fenced["connect"] == "connected"  # this kernel's Landlock has no network rights


@needs_landlock
def test_a_runs_pool_reads_its_download_folders_not_the_lake(
    tmp_path: Path, home: Path, listener: int
) -> None:
    settings = Settings(data_dir=str(tmp_path / "data"))
    objects = settings.downloads.root("bucket")
    objects.mkdir(parents=True)
    (objects / "report.txt").write_text("downloaded")
    lake_file = settings.local_path / "lake" / "documents" / "_delta_log" / "0.json"
    lake_file.parent.mkdir(parents=True)
    lake_file.write_text("{}")
    warehouse = settings.warehouse_path
    warehouse.write_text("not a database, but where it lies")
    assert str(objects.parent) in parser_roots(settings.extracting)
    assert not any(Path(root) in tmp_path.parents for root in parser_roots(settings.extracting))

    reads = [str(objects / "report.txt"), str(lake_file), str(warehouse), "~/.aws/credentials"]
    seen = probe(
        pool_config(settings.extracting), reads, [str(settings.local_path / "x")], listener
    )
    assert seen[str(objects / "report.txt")] == "read: downloaded"
    assert seen[str(lake_file)] == "refused: PermissionError"
    assert seen[str(warehouse)] == "refused: PermissionError"
    assert seen["~/.aws/credentials"] == "refused: PermissionError"
    assert seen[str(settings.local_path / "x")] == "refused: PermissionError"


@needs_landlock
@pytest.mark.skipif(not (FIXTURES / "MANIFEST.tsv").is_file(), reason="shared fixtures absent")
def test_every_shared_fixture_extracts_as_it_does_unfenced() -> None:
    names = sorted(p.name for p in FIXTURES.iterdir() if p.name != "MANIFEST.tsv")
    stored = [(name, f"etag-{i}", str(FIXTURES / name)) for i, name in enumerate(names)]

    def rows(config: PoolConfig) -> list[dict[str, object]]:
        with WorkerPool(config) as pool:
            docs = extract_batch(Settings().extracting, "fixtures", stored, run_id="t", pool=pool)
        return [
            {**d.as_row(), "seconds": None, "extracted_at": None, "structure": d.structure}
            for d in docs
        ]

    plain = rows(PoolConfig(workers=2, time_limit=60))
    fenced = rows(PoolConfig(workers=2, time_limit=60, read_roots=(str(FIXTURES),)))
    assert [r["key"] for r in fenced] == names
    assert {r["kind"] for r in fenced} >= {"pdf", "docx", "dxf", "dwg", "html", "txt"}
    for a, b in zip(plain, fenced, strict=True):
        assert a == b, a["key"]


def test_without_landlock_the_workers_run_unfenced_and_the_log_says_so(
    tmp_path: Path, home: Path, listener: int, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    """Where the kernel answers that it has no Landlock (0 here, as an old kernel or a
    container's filter answers), the workers run as they would unfenced, and the run says
    so once, never that they are fenced."""
    monkeypatch.setattr(fence, "landlock_abi", lambda: 0)
    monkeypatch.setattr("ingest.extract.spawn._said", set())
    config = PoolConfig(workers=1, read_roots=(str(tmp_path),))
    with caplog.at_level(logging.INFO, logger="ingest.extract.pool"):
        first = probe(config, ["~/.aws/credentials"], [], listener)
        probe(config, [], [], listener)
    assert first["~/.aws/credentials"].startswith("read: ")
    said = [r.getMessage() for r in caplog.records]
    assert sum("without a fence: this kernel has no Landlock" in m for m in said) == 1, said
    assert not any("fenced (Landlock" in m for m in said), said


@needs_landlock
@pytest.mark.skipif(not (FIXTURES / "pdfjs__issue4246.pdf").is_file(), reason="fixtures absent")
@pytest.mark.skipif(ocr_unavailable() is not None, reason=f"OCR cannot run: {ocr_unavailable()}")
def test_ocr_reads_the_same_page_fenced(tmp_path: Path) -> None:
    """The OCR pool's workers are fenced too: tesseract, which a worker starts, runs inside
    the fence (its program, language data and the image in the scratch folder) and reads
    the page as it does unfenced."""
    settings = Settings(data_dir=tmp_path, ocr={"enabled": True, "max_pages": 1, "dpi": 150})
    stored = [("scan.pdf", "etag", str(FIXTURES / "pdfjs__issue4246.pdf"))]

    def text(roots: tuple[str, ...] | None) -> str:
        config = PoolConfig(workers=1, read_roots=roots)
        with WorkerPool(config) as pool, WorkerPool(config) as ocr:
            (doc,) = extract_batch(
                settings.extracting, "b", stored, run_id="r", pool=pool, ocr_pool=ocr
            )
        assert doc.metadata["ocr"] == "1 pages", doc.metadata
        return doc.text

    plain = text(None)
    assert plain.strip()
    assert text((str(FIXTURES),)) == plain
