"""Structured outputs of extraction: pages against pypdfium2, drawing attributes and
header data against ezdxf's own reading, and the common metadata fields; the fixtures
are extracted once, by the real worker pool, as a run does."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import ezdxf
import pypdfium2 as pdfium
import pytest
from ezdxf import recover

from ingest import storage
from ingest.extract.base import clean_text
from ingest.extract.batch import extract_batch
from ingest.extract.metadata import detect_language, pdf_date
from ingest.extract.pool import PoolConfig, WorkerPool
from ingest.extract.structure import CURRENT, stage_documents
from ingest.extract.structure import rows as structure_rows
from ingest.records import Document
from ingest.settings import Settings
from tests.extract_support import FIXTURES, KOREAN, cid_pdf
from tests.helpers import ROOT
from tests.helpers import rows as query

pytestmark = pytest.mark.skipif(
    not (FIXTURES / "MANIFEST.tsv").is_file(),
    reason="shared fixtures (../shared/fixtures/documents beside the project) are absent",
)


def title_block_drawing() -> bytes:
    """A drawing with a TITLE block (DWGNO, SCALE, AUTHOR attributes) inserted on a paper
    space layout, and a DOOR tag block inserted twice in model space on its own layer."""
    doc = ezdxf.new("R2010")
    doc.header["$INSUNITS"] = 4  # millimeters
    doc.layers.add("A-DOOR")
    doc.layers.add("TITLE")
    title = doc.blocks.new("TITLE")
    for i, tag in enumerate(("DWGNO", "SCALE", "AUTHOR")):
        title.add_attdef(tag, (0, -5 * i), dxfattribs={"height": 2.5})
    door = doc.blocks.new("DOOR")
    door.add_attdef("MARK", (0, 0), dxfattribs={"height": 1.8})
    msp = doc.modelspace()
    msp.add_text("GROUND FLOOR", dxfattribs={"height": 5})
    for mark, x in (("D-01", 10.0), ("D-02", 20.0)):
        msp.add_blockref("DOOR", (x, 3.0), dxfattribs={"layer": "A-DOOR"}).add_auto_attribs(
            {"MARK": mark}
        )
    paper = doc.layouts.new("Sheet A1")
    paper.add_blockref("TITLE", (400.0, 20.0), dxfattribs={"layer": "TITLE"}).add_auto_attribs(
        {"DWGNO": "A-101", "SCALE": "1:100", "AUTHOR": "J. Kim"}
    )
    out = io.StringIO()
    doc.write(out)
    return out.getvalue().encode("utf-8")


def multi_page_pdf(pages: list[str]) -> bytes:
    """A PDF with one line of Helvetica text per page, written by pdfium itself."""
    pdf = pdfium.PdfDocument.new()
    font = pdfium.raw.FPDFText_LoadStandardFont(pdf.raw, b"Helvetica")
    for text in pages:
        page = pdf.new_page(300, 200)
        obj = pdfium.raw.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", 12.0)
        encoded = (text + "\0").encode("utf-16-le")
        buf = (pdfium.raw.c_ushort * (len(encoded) // 2)).from_buffer_copy(encoded)
        pdfium.raw.FPDFText_SetText(obj, buf)
        pdfium.raw.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 20, 100)
        pdfium.raw.FPDFPage_InsertObject(page.raw, obj)
        pdfium.raw.FPDFPage_GenerateContent(page.raw)
        page.close()
    del font
    out = io.BytesIO()
    pdf.save(out)
    pdf.close()
    return out.getvalue()


INFO = {
    "Title": "배관 시방서",
    "Author": "김철수",
    "Creator": "Hwp 2020",
    "Producer": "Hancom PDF 1.3",
    "CreationDate": "D:20240131093000+09'00'",
    "ModDate": "D:20240201120000Z",
}

KOREAN_PAGE = f"""<html><head><meta charset="euc-kr"><title>배관 점검 보고서</title>
<meta name="Author" content="김철수"><meta name="generator" content="Hancom Office 2020">
</head><body><p>{KOREAN}</p></body></html>"""


@pytest.fixture(scope="module")
def extracted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Document]:
    folder = tmp_path_factory.mktemp("generated")
    generated = {
        "gen/title-block.dxf": title_block_drawing(),
        "gen/three-pages.pdf": multi_page_pdf(["first page", "second page", "third page"]),
        "gen/korean.pdf": cid_pdf([KOREAN]),
        "gen/korean-info.pdf": cid_pdf([KOREAN, KOREAN], INFO),
        "gen/report.html": KOREAN_PAGE.encode("euc-kr"),
    }
    stored = [
        (name, f"etag-{i}", str(path))
        for i, (name, path) in enumerate(
            sorted((p.name, p) for p in FIXTURES.iterdir() if p.name != "MANIFEST.tsv")
        )
    ]
    for name, data in generated.items():
        path = folder / Path(name).name
        path.write_bytes(data)
        stored.append((name, "etag-gen", str(path)))
    with WorkerPool(PoolConfig(workers=2, time_limit=60)) as pool:
        docs = extract_batch(Settings().extracting, "fixtures", stored, run_id="test", pool=pool)
    return {d.key: d for d in docs}


# ------------------------------------------------------------------------------ pages


def test_pdf_pages_are_pypdfium2s_pages(extracted: dict[str, Document]) -> None:
    checked = 0
    for key, doc in extracted.items():
        if doc.kind != "pdf" or doc.status != "ok" or doc.extractor != "pypdfium2":
            continue
        path = FIXTURES / key if not key.startswith("gen/") else None
        if path is None:
            continue
        pdf = pdfium.PdfDocument(path)
        expected = []
        for i in range(len(pdf)):
            textpage = pdf[i].get_textpage()
            expected.append(clean_text(textpage.get_text_bounded()))
        pdf.close()
        pages = structure_rows([doc])["document_pages"]
        assert [p["page"] for p in pages] == list(range(1, len(expected) + 1)), key
        assert [p["text"] for p in pages] == expected, key
        assert [p["chars"] for p in pages] == [len(t) for t in expected]
        assert doc.metadata["page_count"] == len(expected) == doc.pages
        for p in pages:
            assert p["text"] in doc.text  # documents.text stays the whole text
        checked += 1
    assert checked >= 4  # the 4-page pdfLaTeX file among them


def test_a_generated_pdf_has_a_row_per_page(extracted: dict[str, Document]) -> None:
    pages = structure_rows([extracted["gen/three-pages.pdf"]])["document_pages"]
    assert [(p["page"], p["text"]) for p in pages] == [
        (1, "first page"),
        (2, "second page"),
        (3, "third page"),
    ]
    assert all(p["etag"] == "etag-gen" for p in pages)
    korean = structure_rows([extracted["gen/korean.pdf"]])["document_pages"]
    assert [p["text"] for p in korean] == [KOREAN]


def test_formats_without_pages_are_one_page(extracted: dict[str, Document]) -> None:
    for key in (
        "mammoth__tables.docx",
        "readability__wikipedia-3.html",
        "gen__korean_cp949.txt",
    ):
        doc = extracted[key]
        pages = structure_rows([doc])["document_pages"]
        assert [(p["page"], p["text"]) for p in pages] == [(1, doc.text)], key


def test_failed_documents_have_no_pages(extracted: dict[str, Document]) -> None:
    for key in (
        "gen__zero_length.pdf",
        "pdfjs__issue6010_2.pdf",
        "gen__truncated_pdflatex-outline_50pct.pdf",
    ):
        assert extracted[key].status != "ok"
        assert structure_rows([extracted[key]])["document_pages"] == []


def test_a_dwg_has_a_page_per_layout_and_a_drawing_row(extracted: dict[str, Document]) -> None:
    doc = extracted["ezdxf__dimtad-dimjust.dwg"]
    rows = structure_rows([doc])
    pages = rows["document_pages"]
    assert [p["page"] for p in pages] == [1, 2, 3]  # Model, Layout1, Layout2
    assert "dimtad = 4 (below)" in pages[0]["text"]
    [drawing] = rows["dxf_drawings"]
    assert (drawing["acadver"], drawing["release"]) == ("AC1027", "R2013")
    assert drawing["layouts"] == ["Model", "Layout1", "Layout2"]


# ------------------------------------------------------------------------------ drawings


def _ezdxf_attributes(doc) -> list[tuple]:
    out = []
    layouts = ["Model"] + [n for n in doc.layouts.names_in_taborder() if n != "Model"]
    for name in layouts:
        for insert in doc.layouts.get(name).query("INSERT"):
            for a in insert.attribs:
                out.append(
                    (
                        name,
                        insert.dxf.name,
                        a.dxf.tag,
                        a.plain_text(),
                        insert.dxf.layer,
                        insert.dxf.insert.x,
                        insert.dxf.insert.y,
                    )
                )
    return out


def _ours(doc: Document) -> list[tuple]:
    return [
        (r["layout"], r["block"], r["tag"], r["value"], r["layer"], r["insert_x"], r["insert_y"])
        for r in structure_rows([doc])["dxf_attributes"]
    ]


@pytest.mark.parametrize(
    "name",
    [
        "ezdxf__text_negative_extrusion.dxf",
        "gen__korean_r2000_small.dxf",
        "ezdxf__ASCII_R12.dxf",
        "ezdxf__dimension_in_block.dxf",
        "ezdxf__mtext_columns_R2018.dxf",
        "librecad__Relay-2p2w.dxf",
    ],
)
def test_dxf_attributes_and_header_as_ezdxf_reads_them(
    extracted: dict[str, Document], name: str
) -> None:
    doc = extracted[name]
    theirs, _auditor = recover.readfile(FIXTURES / name)
    assert _ours(doc) == _ezdxf_attributes(theirs)
    positions = [r["position"] for r in structure_rows([doc])["dxf_attributes"]]
    assert positions == list(range(1, len(positions) + 1))
    (drawing,) = structure_rows([doc])["dxf_drawings"]
    assert drawing["acadver"] == theirs.dxfversion
    assert drawing["layers"] == [layer.dxf.name for layer in theirs.layers]
    assert set(drawing["blocks"]) == {
        b.name for b in theirs.blocks if not b.name.startswith("*") and not b.is_any_layout
    }
    assert drawing["insunits"] == theirs.header.get("$INSUNITS")
    assert drawing["attributes"] == len(positions)
    heights = {
        round(e.dxf.char_height if e.dxftype() == "MTEXT" else e.dxf.height, 6)
        for e in theirs.entitydb.values()
        if e.dxftype() in ("TEXT", "MTEXT", "ATTRIB", "ATTDEF")
    }
    assert drawing["text_heights"] == sorted(h for h in heights if h > 0)
    # A page per layout, as ``documents.pages`` counts them.
    assert len(structure_rows([doc])["document_pages"]) == doc.pages


def test_korean_title_block_attributes(extracted: dict[str, Document]) -> None:
    values = {r[2]: r[3] for r in _ours(extracted["gen__korean_r2000_small.dxf"])}
    assert values["TITLE"] == "지하주차장 평면도"
    assert values["DWGNO"] == "KR-2024-0007"


def test_a_title_block_on_paper_space_is_fields(extracted: dict[str, Document]) -> None:
    doc = extracted["gen/title-block.dxf"]
    rows = structure_rows([doc])
    assert _ours(doc) == [
        ("Model", "DOOR", "MARK", "D-01", "A-DOOR", 10.0, 3.0),
        ("Model", "DOOR", "MARK", "D-02", "A-DOOR", 20.0, 3.0),
        ("Sheet A1", "TITLE", "DWGNO", "A-101", "TITLE", 400.0, 20.0),
        ("Sheet A1", "TITLE", "SCALE", "1:100", "TITLE", 400.0, 20.0),
        ("Sheet A1", "TITLE", "AUTHOR", "J. Kim", "TITLE", 400.0, 20.0),
    ]
    (drawing,) = rows["dxf_drawings"]
    assert drawing["units"] == "millimeters"
    assert drawing["acadver"] == "AC1024"
    assert {"A-DOOR", "TITLE", "0"} <= set(drawing["layers"])
    assert set(drawing["blocks"]) == {"TITLE", "DOOR"}
    assert drawing["text_heights"] == [1.8, 2.5, 5.0]
    assert drawing["layouts"][0] == "Model" and "Sheet A1" in drawing["layouts"]
    # As ezdxf reads the same drawing, model space and the paper space layout.
    theirs = ezdxf.read(io.StringIO(title_block_drawing().decode("utf-8")))
    assert _ours(doc) == _ezdxf_attributes(theirs)
    assert {r[0] for r in _ours(doc)} == {"Model", "Sheet A1"}


# ------------------------------------------------------------------------------ metadata


def test_metadata_from_each_formats_own_fields(extracted: dict[str, Document]) -> None:
    pdf = extracted["pdfjs__issue15340.pdf"].metadata
    assert pdf["title"] == "issue15340"
    assert pdf["application"] == "Pages"
    assert pdf["producer"].startswith("macOS Version 12.5.1")
    assert pdf["created"] == "2022-09-04T10:32:40+00:00"
    assert pdf["modified"] == "2022-09-04T10:32:40+00:00"
    assert pdf["language"] == "ja"
    latex = extracted["pysf__pdflatex-4-pages.pdf"].metadata
    assert (latex["page_count"], latex["language"], latex["producer"]) == (
        4,
        "en",
        "pdfTeX-1.40.23",
    )
    assert latex["created"] == "2022-04-03T19:59:45+02:00"
    docx = extracted["mammoth__tables.docx"].metadata
    assert docx["author"] == "Michael Williamson"
    assert docx["created"] == "2014-07-05T18:21:00+00:00"
    assert docx["modified"] == "2014-07-05T18:22:00+00:00"
    assert docx["application"] == "Microsoft Office Word 14.0000"
    html = extracted["readability__wikipedia-3.html"].metadata
    assert (html["title"], html["language"], html["page_count"]) == (
        "Hermitian matrix - Wikipedia",
        "en",
        1,
    )
    assert extracted["readability__pixnet.html"].metadata["language"] == "zh"
    page = extracted["gen/report.html"].metadata  # <head> is read before it is stripped
    assert (page["title"], page["author"], page["application"]) == (
        "배관 점검 보고서",
        "김철수",
        "Hancom Office 2020",
    )
    assert (page["encoding"], page["encoding_confidence"], page["language"]) == ("cp949", 1.0, "ko")
    cp949 = extracted["gen__korean_cp949.txt"].metadata
    assert cp949["encoding"] == "cp949" and cp949["language"] == "ko"
    assert 0.5 < cp949["encoding_confidence"] <= 1.0
    utf16 = extracted["gen__drawing_note_utf16le_bom.txt"].metadata
    assert (utf16["encoding"], utf16["encoding_confidence"]) == ("utf-16-le", 1.0)
    assert extracted["chnorm__sample-spanish.txt"].metadata["language"] == "es"
    korean = extracted["gen/korean-info.pdf"].metadata  # an Info dictionary in UTF-16
    assert (korean["title"], korean["author"]) == ("배관 시방서", "김철수")
    assert (korean["producer"], korean["application"]) == ("Hancom PDF 1.3", "Hwp 2020")
    assert (korean["created"], korean["modified"]) == (
        "2024-01-31T09:30:00+09:00",
        "2024-02-01T12:00:00+00:00",
    )
    assert (korean["page_count"], korean["language"]) == (1, "ko")
    dxf = extracted["ezdxf__ASCII_R12.dxf"].metadata
    assert (dxf["created"], dxf["modified"]) == ("2016-03-27T10:43:26", "2016-03-27T10:52:02")
    assert extracted["gen__korean_r2000_small.dxf"].metadata["language"] == "ko"


def test_language_detection_and_pdf_dates() -> None:
    assert detect_language(KOREAN) == "ko"
    assert detect_language("これは日本語の文章です。漢字とかなが混ざっています。") == "ja"
    assert detect_language("这是一个中文句子用于测试语言检测。") == "zh"
    assert (
        detect_language("Der Bericht ist nicht fertig, und die Pläne sind auf dem Tisch.") == "de"
    )
    assert detect_language("Le rapport est prêt et les plans sont sur la table pour vous.") == "fr"
    assert detect_language("Это русский текст для проверки.") == "ru"
    assert detect_language("A-101") is None
    assert pdf_date("D:20240131093000+09'00'") == "2024-01-31T09:30:00+09:00"
    assert pdf_date("D:2024") == "2024-01-01T00:00:00"
    assert pdf_date("garbage") is None


# ------------------------------------------------------------------------------ in the lake


def test_structured_tables_in_the_lake_answer_the_documented_queries(
    extracted: dict[str, Document], data_dir: Path
) -> None:
    docs = list(extracted.values())
    stage_documents(data_dir, "run-1", "batch-1", docs)
    storage.commit_run(data_dir, "run-1")
    # "Every drawing whose title block says scale 1:100"
    hits = query(
        data_dir,
        """SELECT key, block FROM dxf_attributes
           WHERE tag = 'SCALE' AND value = '1:100' ORDER BY key""",
    )
    assert hits == [{"key": "gen/title-block.dxf", "block": "TITLE"}]
    # A title block as one row: its tags as columns.
    sheet = query(
        data_dir,
        """PIVOT (SELECT key, tag, value FROM dxf_attributes WHERE block = 'TITLE')
           ON tag USING first(value)""",
    )
    assert sheet == [
        {"key": "gen/title-block.dxf", "AUTHOR": "J. Kim", "DWGNO": "A-101", "SCALE": "1:100"}
    ]
    # "The page of each hit"
    pages = query(
        data_dir,
        """SELECT key, page FROM document_pages WHERE text = 'second page'""",
    )
    assert pages == [{"key": "gen/three-pages.pdf", "page": 2}]
    count = query(
        data_dir,
        "SELECT count(*) AS n FROM document_pages WHERE key = 'pysf__pdflatex-4-pages.pdf'",
    )
    assert count == [{"n": 4}]
    mm = query(data_dir, "SELECT key FROM dxf_drawings WHERE units = 'millimeters' ORDER BY key")
    assert [r["key"] for r in mm] == [
        "ezdxf__text_negative_extrusion.dxf",
        "gen/title-block.dxf",
        "librecad__Relay-2p2w.dxf",
    ]

    # Every query of the documents page runs, and the title-block one finds the drawing.
    docs_page = (ROOT / "docs" / "documents.md").read_text()
    blocks = [b.split("```", 1)[0] for b in docs_page.split("```sql\n")[1:]]
    statements = [
        s.strip() for b in blocks for s in b.split(";") if s.strip().startswith(("SELECT", "PIVOT"))
    ]
    assert len(statements) >= 6
    results = {sql: query(data_dir, sql) for sql in statements}
    scale = next(r for sql, r in results.items() if "1:100" in sql)
    assert scale == [{"key": "gen/title-block.dxf", "layout": "Sheet A1"}]
    page_hits = next(r for sql, r in results.items() if "'%valve%'" in sql)
    assert {"key": "gen/three-pages.pdf", "page": 2} not in page_hits
    assert any(
        r["key"] == "gen/title-block.dxf"
        for r in next(r for sql, r in results.items() if "A-DOOR" in sql)
    )

    # The PDF changes and has one page now: its rows of the old version are not current.
    import dataclasses
    from datetime import timedelta

    old = extracted["gen/three-pages.pdf"]
    new = dataclasses.replace(
        old,
        etag="etag-new",
        text="only page",
        pages=1,
        structure={"pages": ["only page"]},
        extracted_at=old.extracted_at + timedelta(seconds=1),
    )
    stage_documents(data_dir, "run-2", "batch-1", [new])
    storage.commit_run(data_dir, "run-2")
    current = query(
        data_dir,
        f"""SELECT t.page, t.text FROM document_pages t JOIN documents d ON {CURRENT}
            WHERE t.key = 'gen/three-pages.pdf' ORDER BY t.page""",
    )
    assert current == [{"page": 1, "text": "only page"}]
    stored = query(
        data_dir,
        "SELECT count(*) AS n FROM document_pages WHERE key = 'gen/three-pages.pdf'",
    )
    assert stored == [{"n": 3}]  # merged by position: page 1 replaced, 2 and 3 left behind


# ------------------------------------------------------------------------------ markdown


def styled_word_document() -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("배관 시방서", level=1)
    document.add_paragraph("General notes.")
    document.add_heading("Materials", level=2)
    document.add_paragraph("Steel pipe", style="List Bullet")
    document.add_paragraph("Copper | tube", style="List Bullet")
    document.add_paragraph("First step", style="List Number")
    grid = document.add_table(rows=3, cols=3)
    for r, row in enumerate([["Item", "Size", "Qty"], ["Valve V-101", "DN50", "2"]]):
        for c, value in enumerate(row):
            grid.cell(r, c).text = value
    grid.cell(2, 0).text = "Flange"
    grid.cell(2, 1).paragraphs[0].text = "DN80"
    grid.cell(2, 1).add_paragraph("PN16")
    document.add_paragraph("After the table.")
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def test_a_docx_becomes_markdown_with_its_table(extracted: dict[str, Document]) -> None:
    from ingest.extract import extract_document

    x = extract_document(styled_word_document(), "spec.docx")
    assert x.structure["markdown"] == (
        "# 배관 시방서\n\n"
        "General notes.\n\n"
        "## Materials\n\n"
        "- Steel pipe\n"
        "- Copper | tube\n"
        "1. First step\n\n"
        "| Item | Size | Qty |\n"
        "|---|---|---|\n"
        "| Valve V-101 | DN50 | 2 |\n"
        "| Flange | DN80 <br> PN16 |  |\n\n"
        "After the table."
    )
    fixture = extracted["mammoth__tables.docx"]
    assert fixture.structure["markdown"] == (
        "Above\n\n| Top left | Top right |\n|---|---|\n| Bottom left | Bottom right |\n\nBelow"
    )
    assert fixture.as_row()["markdown"] == fixture.structure["markdown"]


def test_an_html_page_becomes_markdown_with_its_table() -> None:
    from ingest.extract import extract_document

    page = """<html><head><title>T</title><style>p{color:red}</style></head><body>
      <h1>Site  report</h1><p>Work <b>went</b>
      well.</p>
      <h2>Open items</h2>
      <ul><li>Pump <i>P-2</i><ul><li>seal</li></ul></li><li>Valve</li></ul>
      <ol><li>Call vendor</li></ol>
      <table><tr><th>Room</th><th>Status</th></tr>
        <tr><td>B1 | 101</td><td>done</td></tr>
        <tr><td>B2</td><td><table><tr><td>nested</td></tr></table></td></tr></table>
      <p>End.</p></body></html>"""
    x = extract_document(page.encode(), "report.html")
    assert x.structure["markdown"] == (
        "# Site report\n\n"
        "Work went well.\n\n"
        "## Open items\n\n"
        "- Pump P-2\n"
        "  - seal\n"
        "- Valve\n\n"
        "1. Call vendor\n\n"
        "| Room | Status |\n"
        "|---|---|\n"
        "| B1 \\| 101 | done |\n"
        "| B2 | nested |\n\n"
        "End."
    )
    assert "Site report" in x.text and "color:red" not in x.text


def test_a_pdf_becomes_markdown_pages_and_headings(extracted: dict[str, Document]) -> None:
    md = extracted["gen/three-pages.pdf"].structure["markdown"]
    assert md == (
        "<!-- page 1 -->\n\nfirst page\n\n<!-- page 2 -->\n\nsecond page\n\n"
        "<!-- page 3 -->\n\nthird page"
    )
    latex = extracted["pysf__pdflatex-4-pages.pdf"].structure["markdown"]
    assert [line for line in latex.splitlines() if line.startswith("<!--")] == [
        f"<!-- page {n} -->" for n in range(1, 5)
    ]
    chapter = extracted["pysf__pdflatex-image.pdf"].structure["markdown"]
    # The chapter title is set at 20.7 pt, the body at 10.9 pt.
    assert chapter.startswith("<!-- page 1 -->\n\n## 1 Your Chapter\n\nLorem ipsum dolor")
    assert [line for line in chapter.splitlines() if line.startswith("#")] == ["## 1 Your Chapter"]


# ------------------------------------------------------------------------------ chunks


def _assert_covered(pages: list[str], chunks: list[list], size: int) -> None:
    by_page: dict[int, list[tuple[int, int]]] = {}
    for page, start, end, _heading in chunks:
        assert 0 <= start < end <= len(pages[page - 1]) or (start == end == 0)
        assert end - start <= size
        by_page.setdefault(page, []).append((start, end))
    for number, text in enumerate(pages, start=1):
        spans = by_page.get(number, [])
        covered = 0
        for start, end in spans:  # in order, each beginning at or before the last end
            assert start <= covered, (number, start, covered)
            covered = max(covered, end)
        assert covered == len(text), (number, covered, len(text))


@pytest.mark.parametrize(("size", "overlap"), [(2000, 200), (300, 60), (120, 0), (100, 50)])
def test_every_character_is_in_some_chunk(
    extracted: dict[str, Document], size: int, overlap: int
) -> None:
    from ingest.extract.chunks import chunk_pages, headings_of

    for key, doc in extracted.items():
        if doc.status != "ok":
            continue
        pages = doc.structure.get("pages") or [doc.text]
        chunks = chunk_pages(
            pages, headings_of(doc.structure.get("markdown")), size=size, overlap=overlap
        )
        _assert_covered(pages, chunks, size)
        if len(pages) == 1:
            assert pages[0] == doc.text, key  # one page: the chunks cover documents.text


def test_chunks_follow_headings_and_carry_their_path() -> None:
    from ingest.extract import extract_document
    from ingest.extract.chunks import add_chunks

    x = extract_document(styled_word_document(), "spec.docx")
    add_chunks(x, size=100, overlap=10)
    headings = [c[3] for c in x.structure["chunks"]]
    assert headings[0] == "배관 시방서"
    assert "배관 시방서 > Materials" in headings
    # A chunk begins where its heading does: no chunk holds text of two sections.
    materials = next(c for c in x.structure["chunks"] if c[3] == "배관 시방서 > Materials")
    assert x.text[materials[1] :].startswith("Materials")


def test_chunk_rows_have_stable_ids_and_the_settings_reach_the_worker(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("\n\n".join(f"Paragraph {i}: " + "valve check " * 8 for i in range(30)))
    stored = [("doc/notes.txt", "etag-1", str(path))]
    settings = Settings(chunk={"chars": 200, "overlap": 20})
    with WorkerPool(PoolConfig(workers=1, time_limit=60)) as pool:
        first = extract_batch(settings.extracting, "b", stored, run_id="r1", pool=pool)
        again = extract_batch(settings.extracting, "b", stored, run_id="r2", pool=pool)
        changed = extract_batch(
            settings.extracting,
            "b",
            [("doc/notes.txt", "etag-2", str(path))],
            run_id="r3",
            pool=pool,
        )
    rows_1 = structure_rows(first)["document_chunks"]
    assert max(r["chars"] for r in rows_1) <= 200 and len(rows_1) > 10  # the setting's size
    assert all(r["text"].endswith("\n\n") for r in rows_1[:-1])  # cut at paragraphs
    assert [r["position"] for r in rows_1] == list(range(1, len(rows_1) + 1))
    assert [r["chunk_id"] for r in rows_1] == [
        r["chunk_id"] for r in structure_rows(again)["document_chunks"]
    ]
    assert not {r["chunk_id"] for r in rows_1} & {
        r["chunk_id"] for r in structure_rows(changed)["document_chunks"]
    }
    assert len({r["chunk_id"] for r in rows_1}) == len(rows_1)


def test_a_documents_own_heading_like_lines_stay_text() -> None:
    """A line of a document's text that begins like a heading or a page marker (``#
    include``, ``<!-- page 9 -->``) is text of the rendition, in PDF, DOCX and HTML alike:
    never a heading of the markdown, a cut of the chunks, nor another page's marker."""
    import docx

    from ingest.extract import extract_document
    from ingest.extract.chunks import headings_of

    tricky = ["# include <stdio.h>", "<!-- page 9 -->"]
    document = docx.Document()
    document.add_heading("Real heading", level=1)
    for line in tricky:
        document.add_paragraph(line)
    out = io.BytesIO()
    document.save(out)
    page = "<html><body><h2>Real heading</h2>" + "".join(
        f"<p>{line.replace('<', '&lt;')}</p>" for line in tricky
    )
    made = {
        "pdf": extract_document(cid_pdf(tricky), "tricky.pdf"),
        "docx": extract_document(out.getvalue(), "tricky.docx"),
        "html": extract_document((page + "</body></html>").encode(), "tricky.html"),
    }
    for kind, x in made.items():
        md = x.structure["markdown"]
        assert x.status == "ok", kind
        for line in tricky:
            assert line in x.text, kind  # the text keeps them as they are
            assert "\\" + line in md.splitlines(), (kind, md)
        assert [text for _, text in headings_of(md)] == ([] if kind == "pdf" else ["Real heading"])
        markers = [ln for ln in md.splitlines() if ln.startswith("<!--")]
        assert markers == (["<!-- page 1 -->"] if kind == "pdf" else []), (kind, markers)


def test_every_option_that_changes_the_output_is_in_the_extractor_string() -> None:
    """A changed option re-extracts exactly the kinds whose output it changes: the string
    of a kind differs under it, the others' do not."""
    from ingest.extract import provenance

    base = provenance.versions(Settings().extracting)
    changed = {
        "extract.max_chars": {k for k in base if provenance.family(k) != "detect"},
        "chunk.chars": {k for k in base if provenance.family(k) != "detect"},
        "extract.max_pages": {"pdf"},
    }
    for option, kinds in changed.items():
        group, field = option.split(".")
        value = getattr(getattr(Settings(), group), field) + 500
        given: dict[str, Any] = {group: {field: value}}
        other = provenance.versions(Settings(**given).extracting)
        assert {k for k in base if other[k] != base[k]} == kinds, option
