"""Optional OCR: off by default, skipped cleanly (with the reason kept) when tesseract is
missing, and run within its page cap when it is there."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.extract.batch import extract_batch
from ingest.extract.ocr import ocr_unavailable
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings
from tests.extract_support import FIXTURES

IMAGE_ONLY = FIXTURES / "pdfjs__issue4246.pdf"
pytestmark = pytest.mark.skipif(not IMAGE_ONLY.is_file(), reason="shared fixtures are absent")


def run(settings: Settings) -> dict:
    stored = [("scan.pdf", "etag", str(IMAGE_ONLY))]
    with WorkerPool(PoolConfig(workers=1)) as pool, WorkerPool(PoolConfig(workers=1)) as ocr:
        (doc,) = extract_batch(settings, "b", stored, run_id="r", pool=pool, ocr_pool=ocr)
    return {"doc": doc}


def test_ocr_is_off_by_default(tmp_path: Path) -> None:
    assert Settings().ocr_enabled is False
    doc = run(Settings(data_dir=tmp_path))["doc"]
    assert (doc.status, doc.needs_ocr) == ("ok", 1)
    assert "ocr" not in doc.metadata


@pytest.mark.skipif(ocr_unavailable() is None, reason="tesseract is installed here")
def test_enabled_without_tesseract_keeps_needs_ocr_and_says_why(tmp_path: Path) -> None:
    doc = run(Settings(data_dir=tmp_path, ocr_enabled=True))["doc"]
    assert (doc.status, doc.needs_ocr) == ("ok", 1)
    assert doc.metadata["ocr"].startswith("skipped: ")


@pytest.mark.skipif(
    ocr_unavailable() is not None, reason=f"OCR cannot run here: {ocr_unavailable()}"
)
def test_enabled_with_tesseract_reads_the_page(tmp_path: Path) -> None:
    doc = run(Settings(data_dir=tmp_path, ocr_enabled=True, ocr_max_pages=1, ocr_dpi=150))["doc"]
    assert doc.metadata["ocr"] == "1 pages"
    assert doc.needs_ocr == 0
