"""Sample documents the project generates itself (for the demo and tests).

Each is small and built with the standard library: a text PDF, an R12 DXF
drawing, a DOCX, HTML, plain text in UTF-8, CP949 and UTF-16, plus broken
ones (a truncated PDF, an empty file) and a hostile key.
"""

from __future__ import annotations

import io
import zipfile


def pdf(text: str) -> bytes:
    """A one-page PDF showing ``text`` in Helvetica, with a correct xref table."""
    stream = f"BT /F1 18 Tf 72 720 Td ({text}) Tj ET".encode("latin-1")
    return pdf_file(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        ]
    )


def pdf_file(objects: list[bytes], header: bytes = b"%PDF-1.4\n") -> bytes:
    """A PDF file of ``objects`` (object 1 is the catalog), numbered from 1 in order,
    after ``header``, with a correct xref table and trailer."""
    out = io.BytesIO()
    out.write(header)
    offsets = []
    for i, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % i + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for off in offsets:
        out.write(b"%010d 00000 n \n" % off)
    out.write(
        b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    )
    return out.getvalue()


def dxf(texts: list[str]) -> bytes:
    """An R2000 drawing (written by ezdxf) with one TEXT entity per string."""
    import ezdxf

    doc = ezdxf.new("R2000")
    msp = doc.modelspace()
    for i, t in enumerate(texts):
        msp.add_text(t, height=2.5, dxfattribs={"insert": (0, 10 * i)})
    out = io.StringIO()
    doc.write(out)
    return out.getvalue().encode(doc.output_encoding)


def docx(paragraphs: list[str]) -> bytes:
    """A minimal WordprocessingML package."""
    xml = '<?xml version="1.0" encoding="UTF-8"?>'
    ooxml = "http://schemas.openxmlformats.org"
    wml = "application/vnd.openxmlformats-officedocument.wordprocessingml"
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    files = {
        "[Content_Types].xml": f'{xml}<Types xmlns="{ooxml}/package/2006/content-types">'
        '<Default Extension="rels" '
        'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        f'<Override PartName="/word/document.xml" ContentType="{wml}.document.main+xml"/>'
        "</Types>",
        "_rels/.rels": f'{xml}<Relationships xmlns="{ooxml}/package/2006/relationships">'
        f'<Relationship Id="rId1" Type="{ooxml}/officeDocument/2006/relationships/'
        'officeDocument" Target="word/document.xml"/></Relationships>',
        "word/document.xml": f'{xml}<w:document xmlns:w="{ooxml}/wordprocessingml/2006/main">'
        f"<w:body>{body}</w:body></w:document>",
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in files.items():
            z.writestr(name, text.encode("utf-8"))
    return out.getvalue()


def documents() -> dict[str, bytes]:
    """Key (below the prefix) -> bytes of every demo document."""
    korean = "도면 번호 A-101: 지하 1층 평면도"
    good = pdf("Quarterly inspection report - north wing")
    return {
        "reports/inspection-2026-q3.pdf": good,
        "reports/broken/truncated.pdf": good[: len(good) // 2],
        "reports/broken/empty.pdf": b"",
        "drawings/A-101-floor-plan.dxf": dxf(["A-101 FLOOR PLAN", "SCALE 1:100", "DOOR D-12"]),
        "specs/concrete-spec.docx": docx(["Concrete specification", "Grade C30/37, exposure XC3."]),
        "web/notice.html": b"<html><head><meta charset='utf-8'><title>Site notice</title>"
        b"<style>p{color:red}</style></head><body><p>Site closed on Friday.</p></body></html>",
        "notes/readme-utf8.txt": "Caf\u00e9 site notes \u2014 UTF-8 \u2713\n".encode(),
        "notes/korean-cp949.txt": (korean + "\n").encode("cp949"),
        "notes/korean-utf16.txt": (korean + "\n").encode("utf-16"),
        "notes/../escape.txt": b"a hostile key that must never leave the download folder\n",
    }
