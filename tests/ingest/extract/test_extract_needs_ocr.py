"""An image-only PDF (a scan) extracts as ``ok`` with no text: the batch's summary counts
it as needing OCR, with its key and pages, which the run's summary then says."""

from __future__ import annotations

from pathlib import Path

from ingest.extract.batch import extract_batch, summarize
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.report.summary import RunSummary
from ingest.settings import Settings
from tests.extract_support import layered_pdf


def test_a_scan_is_counted_as_needing_ocr(tmp_path: Path) -> None:
    scan, text = tmp_path / "scan.pdf", tmp_path / "text.pdf"
    scan.write_bytes(layered_pdf([("scan", ["PERMIT 4471"]), ("scan", ["PAGE TWO"])]))
    text.write_bytes(layered_pdf([("text", ["INSPECTION REPORT"])]))
    stored = [("in/scan.pdf", "e1", str(scan)), ("in/text.pdf", "e2", str(text))]
    settings = Settings(data_dir=tmp_path / "data")  # OCR off, the default
    with WorkerPool(PoolConfig(workers=1)) as pool:
        docs = extract_batch(settings.extracting, "b", stored, run_id="r", pool=pool)
    by_key = {d.key: d for d in docs}
    assert by_key["in/scan.pdf"].status == "ok" and by_key["in/scan.pdf"].chars == 0
    assert by_key["in/scan.pdf"].needs_ocr == 2
    assert "INSPECTION REPORT" in by_key["in/text.pdf"].text
    part = summarize(docs)
    assert (part.counts, part.needs_ocr, part.needs_ocr_first) == (
        {"ok": 2},
        1,
        [("in/scan.pdf", 2)],
    )
    run = RunSummary(run_id="r")
    run.add_extracted(part)
    run.add_extracted(part)  # two batches add up
    assert run.needs_ocr == 2 and run.needs_ocr_first == [("in/scan.pdf", 2)] * 2
