"""Documents generated here with known text come back with that text, Korean included."""

from __future__ import annotations

import pytest

from ingest.extract import extract_document
from tests.extract_support import KOREAN, cid_pdf, drawing, word_document


def test_pdf_with_korean_cid_font() -> None:
    result = extract_document(cid_pdf([KOREAN, "Inspection report north wing"]), "k.pdf")
    assert (result.kind, result.status, result.extractor) == ("pdf", "ok", "pypdfium2")
    assert KOREAN in result.text
    assert "Inspection report north wing" in result.text
    assert result.pages == 1 and result.needs_ocr == 0


@pytest.mark.parametrize("codepage", [None, "cp949"], ids=["unicode-escapes", "cp949"])
def test_dxf_blocks_attributes_dimensions(codepage: str | None) -> None:
    data = drawing(codepage)
    if codepage is None:
        assert b"\\U+" in data  # Hangul written as \U+XXXX escapes
    else:
        assert b"ANSI_949" in data and "도면".encode("cp949") in data
    result = extract_document(data, "plan.dxf")
    assert (result.kind, result.status) == ("dxf", "ok"), result.error
    text = result.text
    for fragment in (
        "도면 번호 A-101 MODEL-TEXT",  # TEXT
        "첫째 줄\n둘째 줄 MTEXT-TEXT",  # MTEXT as plain text
        "ROOM: 회의실 301",  # ATTRIB tag/value
        "제조사 ACME 상수",  # constant ATTDEF
        "내부 블록 문자 INNER-TEXT",  # text of a block nested in a block
        "배열 GRID-CELL",  # MINSERT block
        "치수 DIM-OVERRIDE",  # dimension override ...
        "지시선 메모 LEADER-NOTE",  # MULTILEADER
        "표제란 TITLE-BLOCK",  # paper space
    ):
        assert fragment in text, fragment
    assert "<>" not in text  # ... with the measurement in place of <>
    assert "\\U+" not in text
    assert result.metadata["layouts"] == ["Model", "Layout1"]
    assert result.metadata["release"] == "R2000"
    assert text.count("GRID-CELL") == 1  # block text once, however often it is inserted


@pytest.mark.parametrize("version", ["R2007", "R2018"])
def test_dxf_of_autocad_2007_and_later_is_utf8_whatever_its_codepage(version: str) -> None:
    """From AC1021 on a DXF is UTF-8; a $DWGCODEPAGE of ANSI_949 (or ezdxf's ANSI_1252)
    must not turn its Hangul into mojibake."""
    import io

    import ezdxf

    doc = ezdxf.new(version)
    doc.modelspace().add_text(f"{KOREAN} R-TEXT")
    out = io.StringIO()
    doc.write(out)
    data = out.getvalue().encode("utf-8")
    data = data.replace(b"ANSI_1252", b"ANSI_949")  # a Korean installation's header
    assert b"ANSI_949" in data and KOREAN.encode("utf-8") in data
    result = extract_document(data, "plan.dxf")
    assert (result.kind, result.status) == ("dxf", "ok"), result.error
    assert f"{KOREAN} R-TEXT" in result.text
    assert result.metadata["encoding"] == "utf-8"


def test_truncated_dxf_is_trimmed_and_recovered() -> None:
    data = drawing()
    cut = data[: int(len(data) * 0.8)]
    result = extract_document(cut, "cut.dxf")
    assert result.status == "ok"
    assert "MODEL-TEXT" in result.text


def test_docx_tables_headers_footers() -> None:
    result = extract_document(word_document(), "spec.docx")
    assert (result.kind, result.status) == ("docx", "ok"), result.error
    for fragment in (
        "머리글 HEADER-TEXT",
        "바닥글 FOOTER-TEXT",
        "본문 문단 BODY-TEXT",
        "셀 하나 CELL-ONE",
        "셀 넷 CELL-FOUR",
        "중첩 표 NESTED-CELL",
    ):
        assert fragment in result.text, fragment
    assert result.text.index("HEADER-TEXT") < result.text.index("BODY-TEXT")
    assert result.text.count("NESTED-CELL") == 1


def test_docx_strict_or_odd_package_falls_back_to_xml() -> None:
    import io
    import zipfile

    ns = "http://purl.oclc.org/ooxml/wordprocessingml/main"  # strict OOXML
    body = (
        f'<w:document xmlns:w="{ns}"><w:body><w:p><w:r><w:t>엄격한 STRICT-TEXT</w:t>'
        "</w:r></w:p></w:body></w:document>"
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("word/document.xml", body)
    result = extract_document(out.getvalue(), "strict.docx")
    assert (result.kind, result.status, result.extractor) == ("docx", "ok", "docx-xml")
    assert "엄격한 STRICT-TEXT" in result.text


HTML = (
    "<!doctype html><html><head>{meta}<title>현장 공지</title><style>p {{color: red}}</style>"
    "<script>var hidden = '스크립트';</script></head><body><p>현장은 <b>금요일</b>에 닫습니다.</p>"
    "<noscript>노스크립트</noscript><template>템플릿</template><div>Site closed Friday</div>"
    "</body></html>"
)


@pytest.mark.parametrize(
    ("encoding", "meta"),
    [
        ("cp949", '<meta charset="euc-kr">'),
        ("cp949", ""),  # no declaration: detected
        ("utf-8", ""),
        ("utf-16", ""),  # with BOM
        ("utf-8", '<meta http-equiv="Content-Type" content="text/html; charset=utf-8">'),
    ],
)
def test_html_visible_text_in_any_encoding(encoding: str, meta: str) -> None:
    data = HTML.format(meta=meta).encode(encoding)
    result = extract_document(data, "notice.html")
    assert (result.kind, result.status) == ("html", "ok")
    assert "현장은 금요일에 닫습니다." in result.text  # inline tags do not split words
    assert "Site closed Friday" in result.text
    assert result.metadata["title"] == "현장 공지"
    for hidden in ("스크립트", "노스크립트", "템플릿", "color"):
        assert hidden not in result.text


@pytest.mark.parametrize("encoding", ["utf-8", "cp949", "utf-16", "utf-16-le", "utf-8-sig"])
def test_plain_text_in_any_encoding(encoding: str) -> None:
    text = f"{KOREAN}\n두 번째 줄: 도면 번호 A-101, 축척 1:100\n" * 3
    result = extract_document(text.encode(encoding), "note.txt")
    assert (result.kind, result.status) == ("txt", "ok"), result.metadata
    assert KOREAN in result.text and "축척 1:100" in result.text


@pytest.mark.parametrize(
    ("name", "body", "kind"),
    [
        ("table.csv", "이름,수량\n밸브,3\n", "csv"),
        ("readme.md", "# 제목\n\n본문\n", "md"),
        ("data.json", '{"이름": "밸브"}', "json"),
        ("data.xml", '<?xml version="1.0"?><a>밸브</a>', "xml"),
    ],
)
def test_text_flavours(name: str, body: str, kind: str) -> None:
    result = extract_document(body.encode("utf-8"), name)
    assert (result.kind, result.status) == (kind, "ok")
    assert "밸브" in result.text or "제목" in result.text


@pytest.mark.parametrize("name", ["blob.bin", "notes.txt", "noext"])
def test_random_bytes_without_nul_are_not_text(name: str) -> None:
    """Random or compressed bytes carry a control byte in ten; text carries none (tabs and
    newlines aside). Even with no NUL in its head and a .txt name, such a file is no text."""
    import random

    rng = random.Random(7)
    data = bytes(b for b in rng.randbytes(20_000) if b)[:8_000]
    result = extract_document(data, name)
    assert result.kind == "unsupported" and result.status == "unsupported", result.kind
    legacy = "Café, naïve façade\tß\r\n\x1b[0m".encode("cp1252") * 200  # a terminal log
    assert extract_document(legacy, name).status == "ok"
