"""Documents with known text for the extraction tests, and misbehaving extractor hooks.

The hooks run inside the pool's worker processes (the pool imports them by
name), so they live in an importable module rather than in a test file.
"""

from __future__ import annotations

import io
import os
import signal
import threading
import time
import zlib
from pathlib import Path

from dev import samples
from ingest.extract import extract_stored
from ingest.extract.base import Extraction

FIXTURES = Path(__file__).resolve().parents[1] / ".." / "shared" / "fixtures" / "documents"

KOREAN = "배관 도면 검토 결과 밸브 위치를 재확인할 것"


# ---------------------------------------------------------------- test-only extractor hooks


def misbehaving_extractor(path: str, name: str, max_pages: int, in_memory_bytes: int) -> Extraction:
    """Hangs on names containing 'hang', segfaults on 'crash', leaves at once on 'exit'
    (``os._exit``: no cleanup, no reply), raises on 'raise', else extracts normally."""
    if "hang" in name:
        threading.Event().wait()  # a parser stuck for ever (the pool's time limit ends it)
    if "crash" in name:
        os.kill(os.getpid(), signal.SIGSEGV)  # a native library dying under us
    if "exit" in name:
        os._exit(70)  # a library that ends the process it runs in
    if "raise" in name:
        raise RuntimeError("parser bug")
    return extract_stored(path, name, max_pages, in_memory_bytes)


def started_then_wait(flag: str, seconds: float) -> str:
    """Write this worker's pid to ``flag`` (the job has started), then work ``seconds``."""
    Path(flag).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "done"


# ---------------------------------------------------------------- generated documents


def cid_pdf(lines: list[str], info: dict[str, str] | None = None) -> bytes:
    """A PDF whose text is Hangul (or anything) in a Type0/Identity-H font with a ToUnicode
    CMap, as Korean PDFs are written; no font file is needed to extract it. ``info``: the
    entries of its Info dictionary (``Title``, ``Author``...), as UTF-16BE text strings."""
    chars = sorted({c for line in lines for c in line})
    cid = {c: i + 1 for i, c in enumerate(chars)}
    bfchar = "\n".join(f"<{cid[c]:04X}> <{ord(c):04X}>" for c in chars)
    cmap = (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
        "/CMapName /Adobe-Identity-UCS def /CMapType 2 def\n"
        "1 begincodespacerange <0000> <FFFF> endcodespacerange\n"
        f"{len(chars)} beginbfchar\n{bfchar}\nendbfchar\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end"
    ).encode()
    ops = ["BT /F1 14 Tf 16 TL 72 720 Td"]
    for line in lines:
        ops.append("<" + "".join(f"{cid[c]:04X}" for c in line) + "> Tj T*")
    ops.append("ET")
    content = zlib.compress("\n".join(ops).encode())
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>",
        b"<< /Type /Font /Subtype /Type0 /BaseFont /MalgunGothic /Encoding /Identity-H "
        b"/DescendantFonts [6 0 R] /ToUnicode 7 0 R >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(content)
        + content
        + b"\nendstream",
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /MalgunGothic "
        b"/CIDSystemInfo << /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> "
        b"/FontDescriptor 8 0 R /DW 1000 >>",
        b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream",
        b"<< /Type /FontDescriptor /FontName /MalgunGothic /Flags 4 "
        b"/FontBBox [0 -200 1000 900] /ItalicAngle 0 /Ascent 900 /Descent -200 "
        b"/CapHeight 700 /StemV 80 >>",
    ]
    if info:
        entries = "".join(
            f"/{k} <FEFF{v.encode('utf-16-be').hex().upper()}> " for k, v in info.items()
        )
        objects.append(f"<< {entries}>>".encode())
    data = samples.pdf_file(objects, header=b"%PDF-1.5\n%\xe2\xe3\xcf\xd3\n")
    if info:  # the trailer follows the cross-reference table: no offset moves
        data = data.replace(b"/Root 1 0 R >>", b"/Root 1 0 R /Info %d 0 R >>" % len(objects))
    return data


def drawing(codepage: str | None = None) -> bytes:
    """An R2000 DXF: model space TEXT/MTEXT, a block with a variable and a constant ATTDEF
    nested in another block, an arrayed MINSERT, a dimension with an override, a multileader
    and a title block in paper space. ``codepage`` (``cp949``) writes Hangul as CP949
    bytes, else as ``\\U+XXXX`` escapes."""
    import ezdxf
    from ezdxf.math import Vec2

    doc = ezdxf.new("R2000", setup=True)
    if codepage:
        doc.encoding = codepage
    inner = doc.blocks.new("INNER")
    inner.add_text("내부 블록 문자 INNER-TEXT")
    door = doc.blocks.new("DOOR")
    door.add_blockref("INNER", (0, 0))
    door.add_attdef("ROOM", (0, 2), text="?")
    const = door.add_attdef("MAKER", (0, 4), text="제조사 ACME 상수")
    const.is_const = True
    msp = doc.modelspace()
    msp.add_text("도면 번호 A-101 MODEL-TEXT")
    msp.add_mtext("첫째 줄\\P둘째 줄 MTEXT-TEXT")
    ref = msp.add_blockref("DOOR", (10, 10))
    ref.add_auto_attribs({"ROOM": "회의실 301"})
    grid = doc.blocks.new("GRIDCELL")
    grid.add_text("배열 GRID-CELL")
    msp.add_blockref("GRIDCELL", (50, 50)).grid(size=(2, 3), spacing=(5, 5))
    msp.add_linear_dim(base=(0, 20), p1=(0, 0), p2=(1200, 0), text="<> 치수 DIM-OVERRIDE").render()
    builder = msp.add_multileader_mtext("Standard")
    builder.set_content("지시선 메모 LEADER-NOTE")
    builder.add_leader_line(ezdxf.render.mleader.ConnectionSide.left, [Vec2(-20, -20)])
    builder.build(insert=Vec2(0, -10))
    psp = doc.paperspace()
    psp.add_text("표제란 TITLE-BLOCK")
    out = io.StringIO()
    doc.write(out)
    return out.getvalue().encode(doc.output_encoding, errors="dxfreplace")


def word_document() -> bytes:
    """A DOCX with a header, a footer, a paragraph and a table holding a nested table."""
    import docx

    document = docx.Document()
    section = document.sections[0]
    section.header.paragraphs[0].text = "머리글 HEADER-TEXT"
    section.footer.paragraphs[0].text = "바닥글 FOOTER-TEXT"
    document.add_paragraph("본문 문단 BODY-TEXT")
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).text = "셀 하나 CELL-ONE"
    table.cell(1, 1).text = "셀 넷 CELL-FOUR"
    nested = table.cell(0, 1).add_table(rows=1, cols=1)
    nested.cell(0, 0).text = "중첩 표 NESTED-CELL"
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def allocate(n: int) -> int:
    """Ask for ``n`` bytes at once (the memory-limit test)."""
    return len(bytearray(n))


def environment() -> dict[str, str]:
    """The environment a job sees (what a hostile document's parser could read)."""
    return dict(os.environ)


def layered_pdf(pages: list[tuple[str, list[str]]]) -> bytes:
    """A PDF written by pdfium: each page is ``("text", lines)``, lines of Helvetica 6 pt
    in its text layer, or ``("scan", lines)``, the lines drawn into a picture (black on
    white, 64 px) that fills the page: no text layer, as a scanned page has none."""
    import pypdfium2 as pdfium
    from PIL import Image, ImageDraw, ImageFont

    pdf = pdfium.PdfDocument.new()
    for layer, lines in pages:
        page = pdf.new_page(600, 200)
        if layer == "scan":
            picture = Image.new("L", (1200, 400), 255)
            draw = ImageDraw.Draw(picture)
            font = ImageFont.load_default(size=64)
            for i, line in enumerate(lines):
                draw.text((40, 40 + 110 * i), line, fill=0, font=font)
            image = pdfium.PdfImage.new(pdf)
            image.set_bitmap(pdfium.PdfBitmap.from_pil(picture))
            image.set_matrix(pdfium.PdfMatrix().scale(600, 200))
            page.insert_obj(image)
        else:
            for i, line in enumerate(lines):
                obj = pdfium.raw.FPDFPageObj_NewTextObj(pdf.raw, b"Helvetica", 6.0)
                encoded = (line + "\0").encode("utf-16-le")
                buf = (pdfium.raw.c_ushort * (len(encoded) // 2)).from_buffer_copy(encoded)
                pdfium.raw.FPDFText_SetText(obj, buf)
                pdfium.raw.FPDFPageObj_Transform(obj, 1, 0, 0, 1, 10, 190 - 8 * i)
                pdfium.raw.FPDFPage_InsertObject(page.raw, obj)
        page.gen_content()
        page.close()
    out = io.BytesIO()
    pdf.save(out)
    pdf.close()
    return out.getvalue()


def modules_loaded(*names: str) -> list[str]:
    """A pool job: which of ``names`` the worker running it has imported."""
    import sys

    return [name for name in names if name in sys.modules]


def read_process_environ(pid: int) -> str:
    """A parser gone bad: what it can read of process ``pid``'s environment (the process
    that started the pool), or the error that stopped it."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError as exc:
        return f"refused: {type(exc).__name__}"


def reach(reads: list[str], writes: list[str], port: int) -> dict[str, str]:
    """A parser gone bad, in a pool worker: read each of ``reads``, create each of
    ``writes``, connect to ``port`` on loopback; what became of each (``read: <text>``,
    ``wrote``, ``connected``, or ``refused: <error>``)."""
    import socket

    out: dict[str, str] = {}
    for path in reads:
        try:
            with open(os.path.expandvars(os.path.expanduser(path)), encoding="utf-8") as f:
                out[path] = f"read: {f.read()}"
        except OSError as exc:
            out[path] = f"refused: {type(exc).__name__}"
    for path in writes:
        try:
            Path(os.path.expandvars(os.path.expanduser(path))).write_text("planted by a parser")
            out[path] = "wrote"
        except OSError as exc:
            out[path] = f"refused: {type(exc).__name__}"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            out["connect"] = "connected"
    except OSError as exc:
        out["connect"] = f"refused: {type(exc).__name__}"
    return out
