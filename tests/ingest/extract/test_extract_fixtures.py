"""Every shared fixture document gets exactly one row with the right kind and status."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from ingest.extract import extract_document
from ingest.extract.batch import extract_batch
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.settings import Settings
from tests.extract_support import FIXTURES

pytestmark = pytest.mark.skipif(
    not (FIXTURES / "MANIFEST.tsv").is_file(),
    reason="shared fixtures (../shared/fixtures/documents beside the project) are absent",
)

# MANIFEST.tsv gives each file's kind; the status each must get is decided here, with why.
EXPECTED_STATUS = {
    "gen__truncated_pdflatex-outline_50pct.pdf": "failed",  # half a PDF: every parser fails
    "gen__zero_length.pdf": "empty",
    "pdfjs__issue6010_2.pdf": "encrypted",  # user password
}
# Text each must contain (Korean included), as a check that the right thing was read.
EXPECTED_TEXT = {
    "gen__korean_cp949.txt": "밸브 V-101의 위치를 재확인할 것",
    "gen__drawing_note_utf16le_bom.txt": "전기 설비 도면은 별도 첨부함",
    "gen__korean_cp949_nometa.html": "배관 도면 검토 결과",
    "gen__korean_r2000_small.dxf": "지하주차장 평면도",
    "ezdxf__ASCII_R12.dxf": "ABC\u00c4\u00dc\u00d6\u03b1\u03b2\u03b3",  # ABCÄÜÖ + Greek
    "pdfjs__issue15340.pdf": "漏電遮断器",
    "pdfjs__bug1606566.pdf": "Bug 1606566",  # pdfium refuses it, pdfminer.six reads it
    "pdfjs__helloworld-bad.pdf": "Hello, world!",
    "mammoth__tables.docx": "Top left",
    "pydocx__doc-odd-even-hdrs.docx": "Even page header",
    "readability__wikipedia-3.html": "Hermitian matrix",
    "readability__pixnet.html": "新竹尖石",
    "chnorm__sample-spanish.txt": "En el principio creó Dios",
}


def manifest() -> dict[str, str]:
    with (FIXTURES / "MANIFEST.tsv").open(encoding="utf-8") as f:
        return {row["file"]: row["kind"] for row in csv.DictReader(f, delimiter="\t")}


@pytest.fixture(scope="module")
def rows() -> dict[str, object]:
    files = manifest()
    stored = [(name, f"etag-{i}", str(FIXTURES / name)) for i, name in enumerate(sorted(files))]
    with WorkerPool(PoolConfig(workers=2, time_limit=60)) as pool:
        docs = extract_batch(Settings().extracting, "fixtures", stored, run_id="test", pool=pool)
    return {"docs": docs, "files": files}


def test_every_fixture_gets_exactly_one_row(rows: dict) -> None:
    keys = [d.key for d in rows["docs"]]
    assert sorted(keys) == sorted(rows["files"])
    assert len(set(keys)) == len(keys)


def test_kind_and_status_match_the_manifest(rows: dict) -> None:
    wrong = {
        d.key: (d.kind, d.status, d.error)
        for d in rows["docs"]
        if d.kind != rows["files"][d.key] or d.status != EXPECTED_STATUS.get(d.key, "ok")
    }
    assert not wrong


def test_fixture_text(rows: dict) -> None:
    by_key = {d.key: d for d in rows["docs"]}
    for name, fragment in EXPECTED_TEXT.items():
        assert fragment in by_key[name].text, name
        assert by_key[name].chars == len(by_key[name].text)


def test_details_of_special_files(rows: dict) -> None:
    by_key = {d.key: d for d in rows["docs"]}
    assert by_key["pdfjs__issue4246.pdf"].needs_ocr == 1  # image-only page
    assert by_key["pysf__pdflatex-4-pages.pdf"].pages == 4
    dwg = by_key["ezdxf__dimtad-dimjust.dwg"]  # R2013 DWG: read with ezdwg
    assert (dwg.kind, dwg.status, dwg.extractor) == ("dwg", "ok", "ezdwg")
    lines = dwg.text.split("\n")
    # its dimensions' text, as measured (600 and 2000 units), beside its labels
    assert lines.count("600") == 15 and lines.count("2000") == 15
    assert "dimtad = 4 (below)" in lines and "dimjust = 4" in lines
    assert dwg.metadata["dxf_version"] == "AC1027" and dwg.metadata["layouts"][0] == "Model"
    assert "password" in (by_key["pdfjs__issue6010_2.pdf"].error or "")
    truncated = by_key["gen__truncated_text_fonts_40pct.dxf"]
    assert truncated.chars > 1000  # trimmed and recovered, not lost
    assert any("truncated" in w for w in truncated.metadata["warnings"])
    pdf = by_key["gen__truncated_pdflatex-outline_50pct.pdf"]
    assert "%%EOF" in (pdf.error or "") or "pdfminer" in (pdf.error or "")
    columns = by_key["ezdxf__mtext_columns_R2018.dxf"]
    assert columns.chars > 4000  # all columns of the multi-column MTEXT
    assert by_key["gen__korean_r2000_small.dxf"].metadata["layouts"][0] == "Model"


def test_not_a_pdf_names_the_cause() -> None:
    body = b'<?xml version="1.0"?><Error><Code>AccessDenied</Code></Error>'
    result = extract_document(body, "report.pdf")
    assert (result.kind, result.status) == ("pdf", "failed")
    assert "S3 error body" in (result.error or "")


def test_kind_is_told_by_content_not_name(tmp_path: Path) -> None:
    pdf = (FIXTURES / "pysf__pdflatex-4-pages.pdf").read_bytes()
    assert extract_document(pdf, "misnamed.txt").kind == "pdf"
    assert extract_document(b"\x89PNG\r\n\x1a\n\x00\x00", "photo.png").status == "unsupported"
    assert extract_document(b"", "notes.txt").status == "empty"
