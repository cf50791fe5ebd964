"""Optional OCR: off by default, skipped cleanly (with the reason kept) when tesseract is
missing, and run within its page cap when it is there; the OCR'd text lands on its page
(``document_pages``), in the markdown and in the chunks as text-layer text does, within
the same bound (``extract_max_chars``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest import storage
from ingest.extract.batch import extract_batch
from ingest.extract.ocr import ocr_unavailable
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.extract.structure import CURRENT, stage_documents
from ingest.extract.structure import rows as structure_rows
from ingest.records import Document
from ingest.settings import Settings
from tests.extract_support import FIXTURES, layered_pdf
from tests.helpers import rows as query

IMAGE_ONLY = FIXTURES / "pdfjs__issue4246.pdf"
pytestmark = pytest.mark.skipif(not IMAGE_ONLY.is_file(), reason="shared fixtures are absent")


def run(settings: Settings, path: Path = IMAGE_ONLY) -> dict:
    stored = [("scan.pdf", "etag", str(path))]
    with WorkerPool(PoolConfig(workers=1)) as pool, WorkerPool(PoolConfig(workers=1)) as ocr:
        (doc,) = extract_batch(
            settings.extracting, "b", stored, run_id="r", pool=pool, ocr_pool=ocr
        )
    return {"doc": doc}


def test_ocr_is_off_by_default(tmp_path: Path) -> None:
    assert Settings().ocr.enabled is False
    doc = run(Settings(data_dir=tmp_path))["doc"]
    assert (doc.status, doc.needs_ocr) == ("ok", 1)
    assert "ocr" not in doc.metadata


@pytest.mark.skipif(ocr_unavailable() is None, reason="tesseract is installed here")
def test_enabled_without_tesseract_keeps_needs_ocr_and_says_why(tmp_path: Path) -> None:
    doc = run(Settings(data_dir=tmp_path, ocr={"enabled": True}))["doc"]
    assert (doc.status, doc.needs_ocr) == ("ok", 1)
    assert doc.metadata["ocr"].startswith("skipped: ")


@pytest.mark.skipif(
    ocr_unavailable() is not None, reason=f"OCR cannot run here: {ocr_unavailable()}"
)
def test_enabled_with_tesseract_reads_the_page(tmp_path: Path) -> None:
    doc = run(Settings(data_dir=tmp_path, ocr={"enabled": True, "max_pages": 1, "dpi": 150}))["doc"]
    assert doc.metadata["ocr"] == "1 pages"
    assert doc.needs_ocr == 0
    (page,) = structure_rows([doc])["document_pages"]
    assert page["text"] and page["text"] == doc.text  # one page: its OCR'd text


needs_tesseract = pytest.mark.skipif(
    ocr_unavailable() is not None, reason=f"OCR cannot run here: {ocr_unavailable()}"
)
BODY = [f"line {i:02d}" + " pipe valve flange" * 4 for i in range(20)]  # 1,599 characters


def scanned_between(
    tmp_path: Path, first: list[str], last: tuple[str, ...] | list[str] = ("third page",)
) -> Path:
    """Page 1 and 3 with a text layer, page 2 a scan of two lines."""
    path = tmp_path / "mixed.pdf"
    path.write_bytes(
        layered_pdf(
            [
                ("text", first),
                ("scan", ["THE VALVE AND THE PUMP", "ROOM 42 OF THE PLANT"]),
                ("text", list(last)),
            ]
        )
    )
    return path


def _covered(pages: list[str], chunks: list[dict]) -> None:
    """Every character of every page is in some chunk of that page."""
    for number, text in enumerate(pages, start=1):
        end = 0
        for c in (c for c in chunks if c["page_start"] == number):
            assert c["start"] <= end and c["text"] == text[c["start"] : c["end"]]
            end = max(end, c["end"])
        assert end == len(text), number


@needs_tesseract
def test_ocr_text_lands_on_its_page_in_the_markdown_and_the_chunks(
    tmp_path: Path, data_dir: Path
) -> None:
    settings = Settings(ocr={"enabled": True, "dpi": 150}, chunk={"chars": 200, "overlap": 20})
    doc: Document = run(settings, scanned_between(tmp_path, ["first page"]))["doc"]
    assert (doc.status, doc.needs_ocr, doc.metadata["ocr"]) == ("ok", 0, "1 pages")
    tables = structure_rows([doc])
    pages = [p["text"] for p in tables["document_pages"]]
    assert pages[0] == "first page" and pages[2] == "third page"
    assert "THE VALVE AND THE PUMP" in pages[1] and "ROOM 42 OF THE PLANT" in pages[1]
    # The whole text in page order, its length counted again.
    assert doc.text.index("first page") < doc.text.index("VALVE") < doc.text.index("third")
    assert doc.chars == len(doc.text)
    assert doc.metadata["language"] == "en"
    # The markdown: the OCR'd lines after page 2's marker, before page 3's.
    md = doc.structure["markdown"]
    assert (
        md.index("<!-- page 2 -->")
        < md.index("THE VALVE AND THE PUMP")
        < md.index("<!-- page 3 -->")
    )
    # The chunks: cut again, page 2's text among them, every character in one.
    chunks = tables["document_chunks"]
    assert any(c["page_start"] == 2 and "ROOM 42" in c["text"] for c in chunks)
    _covered(pages, chunks)
    # And in the lake, as a page of its own.
    stage_documents(data_dir, "run-1", "batch-1", [doc])
    storage.commit_run(data_dir, "run-1")
    hit = query(
        data_dir,
        f"""SELECT t.page FROM document_pages t JOIN documents d ON {CURRENT}
            WHERE t.text LIKE '%ROOM 42 OF THE PLANT%'""",
    )
    assert hit == [{"page": 2}]


@needs_tesseract
def test_ocr_text_obeys_the_bound_on_text_pages_and_markdown(tmp_path: Path) -> None:
    settings = Settings(ocr={"enabled": True, "dpi": 150}, extract={"max_chars": 1000})
    doc: Document = run(settings, scanned_between(tmp_path, BODY))["doc"]
    assert doc.status == "ok"
    pages = [p["text"] for p in structure_rows([doc])["document_pages"]]
    # Page 1 alone is over the bound: it is cut at 1,000 and the later pages dropped, the
    # scanned page 2 with them (its OCR'd text would have nowhere to go: it is not read).
    assert doc.metadata["ocr"] == "skipped: its pages are past the extract_max_chars bound"
    assert doc.needs_ocr == 1
    assert [len(p) for p in pages] == [1000]
    assert len(doc.text) <= 1000 and doc.chars == len(doc.text)
    assert len(doc.structure["markdown"]) <= 1000
    assert doc.metadata["pages_cut"] == {"pages": 1, "of": 3, "kept": 1000, "chars": 1609}
    assert doc.metadata["text_cut"]["kept"] == 1000

    # A shorter page 1: the OCR'd page fits whole, and page 3 is where the bound cuts.
    first, last = BODY[:10], BODY[:5]  # 799 and 399 characters
    doc = run(settings, scanned_between(tmp_path, first, last))["doc"]
    pages = [p["text"] for p in structure_rows([doc])["document_pages"]]
    assert doc.metadata["ocr"] == "1 pages"
    assert len(pages) == 3 and "ROOM 42 OF THE PLANT" in pages[1]
    assert pages[2] == "\n".join(last)[: 1000 - 799 - len(pages[1])]
    assert sum(len(p) for p in pages) == 1000 and len(doc.text) <= 1000
    assert len(doc.structure["markdown"]) <= 1000
    assert doc.metadata["pages_cut"] == {
        "pages": 3,
        "of": 3,
        "kept": 1000,
        "chars": 799 + len(pages[1]) + 399,
    }
    chunks = structure_rows([doc])["document_chunks"]
    _covered(pages, chunks)


def test_ocr_output_merges_onto_its_page_without_tesseract(tmp_path: Path) -> None:
    """The merge of an OCR job's output, ``(page, text)`` pairs as ``ocr_pdf_pages``
    returns them, into a document the real worker extracted (runs where tesseract is
    absent too): OCR noise that looks like a marker or a heading stays text."""
    from ingest.extract.batch import add_ocr_text
    from ingest.extract.chunks import headings_of

    settings = Settings(chunk={"chars": 200, "overlap": 20})
    doc: Document = run(settings, scanned_between(tmp_path, ["first page"]))["doc"]
    assert doc.needs_ocr == 1 and doc.metadata["ocr_pages"] == [1]
    ocr = "# 7 Hatch\n<!-- page 3 -->\nROOM 42 OF THE PLANT"
    add_ocr_text(doc, [(1, ocr)], settings.extracting)
    pages = [p["text"] for p in structure_rows([doc])["document_pages"]]
    assert pages == ["first page", ocr, "third page"]  # the page's text as read
    assert doc.text == "first page\n\n" + ocr + "\n\nthird page" and doc.chars == len(doc.text)
    assert doc.needs_ocr == 0
    md = doc.structure["markdown"]
    assert md == (
        "<!-- page 1 -->\n\nfirst page\n\n<!-- page 2 -->\n\n"
        "\\# 7 Hatch\n\\<!-- page 3 -->\nROOM 42 OF THE PLANT\n\n<!-- page 3 -->\n\nthird page"
    )
    assert headings_of(md) == []  # no heading made of noise
    chunks = structure_rows([doc])["document_chunks"]
    assert [(c["page_start"], c["text"]) for c in chunks] == list(enumerate(pages, start=1))
