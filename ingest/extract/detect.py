"""Tell a document's kind from its first bytes (magic), not only from its name.

The name is used only where the content cannot tell: a zero-byte file, the
flavour of a plain-text file (csv, md, json ...), and a file whose name
claims a binary format that its bytes do not have (a truncated download, an
S3 XML error body saved as ``.pdf``): that one keeps the claimed kind so its
extractor can fail it with a clear message instead of calling it text.
"""

from __future__ import annotations

import re
import zipfile
from io import BytesIO
from pathlib import PurePosixPath

HEAD = 4096

TEXT_KINDS = {
    "txt": "txt",
    "text": "txt",
    "log": "txt",
    "csv": "csv",
    "tsv": "csv",
    "md": "md",
    "markdown": "md",
    "json": "json",
    "xml": "xml",
}
_CLAIMED_BINARY = {"pdf": "pdf", "docx": "docx", "dwg": "dwg", "dxf": "dxf"}

# DWG magics: AC1001 to AC1032, and the oldest (R1.x to R2.x) with a dot, the three named
# AC1.x followed by the zeros of their headers (a text file may start "AC1.5").
_DWG = re.compile(rb"^(AC1\d{3}|AC1\.(?:2|40|50)\x00|AC2\.\d\d|MC0\.0)")
_DXF_ASCII = re.compile(rb"^\s*(?:999\s*\r?\n[^\n]*\n\s*)*0\s*\r?\n\s*SECTION\s*\r?\n")
_HTML = re.compile(rb"<!doctype\s+html|<html[\s>]|<head[\s>]|<body[\s>]|<meta\s|<title>", re.I)
_IMAGES = (b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"II*\x00", b"MM\x00*", b"RIFF", b"BM")


def extension(name: str) -> str:
    return PurePosixPath(name).suffix.lower().lstrip(".")


def detect_kind(data: bytes, name: str = "") -> str:
    """Kind of a document: pdf, dxf, dwg, docx, html, txt, csv, md, json, xml or unsupported.

    ``data`` is the whole file (zip packages are opened to tell DOCX from
    other zips), or at least its first ``HEAD`` bytes for the other kinds.
    """
    ext = extension(name)
    head = data[:HEAD]
    if not head:
        return (
            _CLAIMED_BINARY.get(ext)
            or TEXT_KINDS.get(ext)
            or ("html" if ext in ("html", "htm") else "unsupported")
        )
    if b"%PDF-" in head[:1024]:
        return "pdf"
    if _DWG.match(head):
        return "dwg"
    if head.startswith(b"AutoCAD Binary DXF"):
        return "dxf"
    if head.startswith(b"PK\x03\x04"):
        return "docx" if _is_docx(data) else "unsupported"
    if head.startswith(_IMAGES) or head.startswith(b"\xd0\xcf\x11\xe0"):  # images, OLE (.doc/.dwg?)
        return _CLAIMED_BINARY.get(ext, "unsupported")
    if not _looks_textual(head):
        return _CLAIMED_BINARY.get(ext, "unsupported")
    probe = _ascii_view(head)
    if _DXF_ASCII.match(probe):
        return "dxf"
    if ext in _CLAIMED_BINARY:
        return _CLAIMED_BINARY[ext]  # claimed PDF/DOCX/DWG whose bytes are text: fail it there
    if _HTML.search(probe[:2048]):
        return "html"
    if ext in TEXT_KINDS:
        return TEXT_KINDS[ext]
    if ext in ("html", "htm", "xhtml"):
        return "html"
    stripped = probe.lstrip()
    if stripped.startswith(b"<?xml"):
        return "xml"
    if stripped[:1] in (b"{", b"["):
        return "json"
    return "txt"


def _is_docx(data: bytes) -> bool:
    try:
        with zipfile.ZipFile(BytesIO(data)) as z:
            names = set(z.namelist())
    except (zipfile.BadZipFile, OSError, ValueError):
        # A truncated package has no central directory; its first entry names still show.
        return b"word/" in data[:65536]
    return "word/document.xml" in names or any(n.startswith("word/") for n in names)


# C0 control bytes that text does not carry (tab, newlines, form feed and escape it does).
_CONTROLS = bytes([*range(1, 9), 11, *range(14, 27), *range(28, 32), 127])
_NOT_CONTROL = bytes(b for b in range(256) if b not in _CONTROLS)


def _looks_textual(head: bytes) -> bool:
    """No NUL bytes and almost no other control bytes (random or compressed bytes carry
    one in ten), or NULs in the alternating pattern of UTF-16/32 text."""
    if head.startswith((b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")):
        return True
    nul = head.count(0)
    if not nul:
        controls = len(head.translate(None, _NOT_CONTROL))
        return controls * 50 <= len(head)  # at most 2 %
    even, odd = head[0::2].count(0), head[1::2].count(0)
    # UTF-16 text: the NULs (high bytes of ASCII characters) all sit on one side; CJK text
    # has few of them. Binary formats have NULs on both sides.
    return min(even, odd) * 8 <= max(even, odd)


def _ascii_view(head: bytes) -> bytes:
    """The head with UTF-16 NULs and a BOM removed, good enough to sniff markers."""
    if head.startswith(b"\xef\xbb\xbf"):
        head = head[3:]
    if head.count(0) > len(head) // 8:
        head = head.replace(b"\x00", b"")
    return head.lstrip(b"\xff\xfe")
