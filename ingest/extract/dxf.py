"""DXF drawings with ezdxf: the text of every layout, block and annotation.

On a real architectural sheet most text lives inside blocks (title blocks,
door tags, symbols), so the walk follows INSERTs into their block
definitions, nested and arrayed (MINSERT), and collects:

* TEXT and MTEXT (as plain text; all columns of a multi-column MTEXT);
* ATTRIB tag/value pairs of block references and constant ATTDEFs;
* DIMENSION text as shown: the override, or the measurement, or both
  (``<>`` in an override stands for the measurement);
* MULTILEADER text and its block attributes.

Model space comes first, then each paper space layout in tab order (title
blocks live there). A block's own text is written once per drawing, however
often it is inserted; each insert's attribute values are written.

``\\U+XXXX`` escapes are decoded; ``$DWGCODEPAGE`` is honoured for drawings
before AutoCAD 2007 (CP949 drawings come back as Hangul); from AutoCAD 2007 on
(``$ACADVER`` AC1021 and above) a DXF file is UTF-8 whatever ``$DWGCODEPAGE``
says, as the DXF reference and ezdxf's own loader have it.
A damaged file is read in ezdxf's recover mode; a truncated one is trimmed
to its last complete tag pair and closed before recovering. A DWG (the binary
AutoCAD format) is placed in the same ezdxf model by ``ingest.extract.dwg`` and
walked here (``extract_drawing``). The metadata also holds the model space extents
of the header (``$EXTMIN``, ``$EXTMAX``) where they are set.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from ingest.extract.base import ExtractError, Extraction, clean_text
from ingest.extract.dxf_data import decode_dxf_escapes, layout_names, release

_MAX_DEPTH = 16
UTF8_FROM = "AC1021"  # $ACADVER of AutoCAD 2007: DXF files are UTF-8 from this release on


def trim_to_last_pair(data: bytes) -> bytes:
    """Cut a truncated ASCII DXF after its last complete (group code, value) pair and
    close it with ENDSEC/EOF, so recover mode keeps everything before the cut."""
    lines = data.split(b"\n")
    if lines and not data.endswith(b"\n"):
        lines = lines[:-1]  # the last line was cut mid-way
    elif lines and lines[-1] == b"":
        lines = lines[:-1]
    if len(lines) % 2:
        lines = lines[:-1]  # a group code without its value
    return b"\n".join(lines) + b"\n  0\nENDSEC\n  0\nEOF\n"


def is_truncated(data: bytes) -> bool:
    """An ASCII DXF that does not end with its ``EOF`` marker stopped early."""
    return not data.startswith(b"AutoCAD Binary DXF") and b"EOF" not in data[-64:]


def read_drawing(data: bytes) -> tuple[Any, list[str]]:
    """Load a drawing: normal reader first, then recover mode; a truncated file (no
    ``EOF``) goes straight to recover mode on a copy trimmed to its last complete pair."""
    from ezdxf import recover
    from ezdxf.lldxf.const import DXFError

    errors = (DXFError, UnicodeDecodeError, ValueError, IndexError, KeyError, TypeError)
    warnings: list[str] = []
    if is_truncated(data):
        # The download (or the writer) stopped early: the normal reader always fails, and
        # recover mode alone drops the unfinished section; trimmed, it keeps its entities.
        try:
            doc, _auditor = recover.read(io.BytesIO(trim_to_last_pair(data)))
        except errors as exc:
            raise ExtractError(f"unreadable truncated DXF, even trimmed: {exc}") from exc
        warnings.append("truncated drawing (no EOF): trimmed to the last complete tag pair")
        return doc, warnings
    try:
        return _read_normal(data), warnings
    except errors as exc:
        warnings.append(f"damaged drawing ({type(exc).__name__}: {exc}); read in recover mode")
    try:
        doc, auditor = recover.read(io.BytesIO(data))
    except errors as exc:
        raise ExtractError(f"unreadable DXF even in recover mode: {exc}") from exc
    if auditor.has_errors:
        warnings.append(f"recover mode reported {len(auditor.errors)} errors")
    return doc, warnings


def _read_normal(data: bytes) -> Any:
    import ezdxf
    from ezdxf.lldxf.tagger import binary_tags_loader
    from ezdxf.lldxf.validator import dxf_info

    if data.startswith(b"AutoCAD Binary DXF"):
        from ezdxf.document import Drawing

        return Drawing.load(binary_tags_loader(data, errors="surrogateescape"))
    # The header says which code page the rest is in: UTF-8 from AC1021 (AutoCAD 2007) on,
    # whatever $DWGCODEPAGE says; before that, the code page $DWGCODEPAGE names.
    info = dxf_info(io.StringIO(data[: 256 * 1024].decode("cp1252", errors="replace")))
    encoding = "utf-8" if info.version >= UTF8_FROM else info.encoding
    text = data.decode(encoding, errors="surrogateescape")
    return ezdxf.read(io.StringIO(text))


class _Walker:
    """Collects the text of one drawing; block text once per block name."""

    def __init__(self, doc: Any) -> None:
        self.doc = doc
        self.blocks_done: set[str] = set()
        self.counts: dict[str, int] = {}

    def layout_text(self, layout: Any) -> list[str]:
        out: list[str] = []
        for entity in layout:
            out.extend(self.entity_text(entity, 0))
        return out

    def entity_text(self, e: Any, depth: int) -> list[str]:
        kind = e.dxftype()
        handler = getattr(self, "_" + kind.lower(), None)
        if handler is None:
            return []
        self.counts[kind] = self.counts.get(kind, 0) + 1
        try:
            return [t for t in handler(e, depth) if t]
        except (AttributeError, ValueError, TypeError, KeyError, IndexError):
            return []  # one malformed entity must not cost the drawing its text

    def _text(self, e: Any, depth: int) -> list[str]:
        return [e.plain_text()]

    def _mtext(self, e: Any, depth: int) -> list[str]:
        # plain_text() of an R2018 multi-column MTEXT already holds every column; for the
        # older linked-column form the linked MTEXTs are separate entities and come by walk.
        return [e.plain_text(split=False)]

    def _attrib(self, e: Any, depth: int) -> list[str]:
        return [_pair(e.dxf.get("tag", ""), e.plain_text())]

    def _attdef(self, e: Any, depth: int) -> list[str]:
        # A variable ATTDEF is a template whose values live in each insert's ATTRIBs.
        return [e.plain_text()] if e.is_const else []

    def _insert(self, e: Any, depth: int) -> list[str]:
        out = [_pair(a.dxf.get("tag", ""), a.plain_text()) for a in e.attribs]
        if e.mcount > 1:
            self.counts["MINSERT"] = self.counts.get("MINSERT", 0) + 1
        name = e.dxf.get("name", "")
        if depth < _MAX_DEPTH and name and name not in self.blocks_done:
            self.blocks_done.add(name)  # also guards against a block that inserts itself
            block = self.doc.blocks.get(name)
            if block is not None:
                for child in block:
                    out.extend(self.entity_text(child, depth + 1))
        return out

    def _dimension(self, e: Any, depth: int) -> list[str]:
        shown = self._geometry_text(e)
        if shown:
            return shown
        override = e.dxf.get("text", "")
        measured = _measurement(e)
        if override in ("", "<>"):
            return [measured]
        if "<>" in override:
            return [override.replace("<>", measured)]
        return [override + (f" ({measured})" if measured and override.strip() != "." else "")]

    def _arc_dimension(self, e: Any, depth: int) -> list[str]:
        return self._dimension(e, depth)

    def _geometry_text(self, e: Any) -> list[str]:
        """The text the dimension's anonymous block shows (what a person sees)."""
        try:
            block = e.get_geometry_block()
        except (AttributeError, KeyError):
            return []
        if block is None:
            return []
        out = []
        for child in block:
            if child.dxftype() == "MTEXT":
                out.append(child.plain_text(split=False))
            elif child.dxftype() == "TEXT":
                out.append(child.plain_text())
        return out

    def _multileader(self, e: Any, depth: int) -> list[str]:
        from ezdxf.tools.text import plain_mtext

        out: list[str] = []
        ctx = e.context
        if ctx.mtext is not None and ctx.mtext.default_content:
            out.append(str(plain_mtext(ctx.mtext.default_content, split=False)))
        for attrib in getattr(e, "block_attribs", None) or []:
            if attrib.text:
                out.append(attrib.text)
        return out

    _mleader = _multileader


def _pair(tag: str, value: str) -> str:
    return f"{tag}: {value}" if tag and value else value


def _measurement(e: Any) -> str:
    try:
        value = e.get_measurement()
    except (AttributeError, ValueError, TypeError, ZeroDivisionError):
        return ""
    if isinstance(value, (int, float)):
        return f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


def extract_dxf(source: bytes | Path) -> Extraction:
    data = source if isinstance(source, bytes) else source.read_bytes()
    doc, warnings = read_drawing(data)
    result = extract_drawing(doc, kind="dxf", extractor="ezdxf", warnings=warnings)
    # From the file's own header: ezdxf sets both variables to the time of loading.
    created, modified = (_julian(_header_value(data, v)) for v in ("TDCREATE", "TDUPDATE"))
    if created:
        result.metadata["created"] = created
    if modified:
        result.metadata["modified"] = modified
    return result


def extract_drawing(
    doc: Any, *, kind: str, extractor: str, warnings: list[str] | None = None
) -> Extraction:
    """The text, pages, metadata and drawing data of a drawing loaded as an ezdxf
    document: a DXF read by ezdxf, or a DWG that ``ingest.extract.dwg`` placed in one."""
    walker = _Walker(doc)
    layouts: list[str] = []
    parts: list[str] = []
    pages: list[str] = []  # one per layout, as ``pages`` counts them
    for name in layout_names(doc):
        layout = doc.layouts.get(name) if name != "Model" else doc.modelspace()
        texts = walker.layout_text(layout)
        layouts.append(name)
        pages.append(clean_text(decode_dxf_escapes("\n".join(texts))))
        if texts:
            parts.append("\n".join(texts))
    text = clean_text(decode_dxf_escapes("\n\n".join(parts)))
    metadata: dict[str, Any] = {
        "dxf_version": doc.dxfversion,
        "release": release(doc.dxfversion),
        "encoding": "utf-8" if doc.dxfversion >= UTF8_FROM else doc.encoding,
        "layouts": layouts,
        "entities": dict(sorted(walker.counts.items())),
    }
    codepage = doc.header.get("$DWGCODEPAGE")
    if codepage:
        metadata["codepage"] = codepage
    for var, name in (("$PROJECTNAME", "project"), ("$TITLE", "title")):
        value = doc.header.get(var)
        if value:
            metadata[name] = decode_dxf_escapes(str(value))
    extents = _extents(doc)
    if extents:
        metadata["extents"] = extents
    result = Extraction(
        kind=kind,
        text=text,
        pages=len(layouts),
        metadata=metadata,
        extractor=extractor,
        structure={"pages": pages, **_drawing_data(doc)},
    )
    for w in warnings or ():
        result.warn(w)
    return result


def _extents(doc: Any) -> list[list[float]] | None:
    """``[[xmin, ymin, zmin], [xmax, ymax, zmax]]`` of model space as the header
    (``$EXTMIN``, ``$EXTMAX``) says, or None where it is unset (min above max)."""
    try:
        low = [float(v) for v in doc.header.get("$EXTMIN")]
        high = [float(v) for v in doc.header.get("$EXTMAX")]
    except (TypeError, ValueError):
        return None
    if len(low) != 3 or len(high) != 3 or any(a > b for a, b in zip(low, high, strict=True)):
        return None
    return [low, high]


def _drawing_data(doc: Any) -> dict[str, Any]:
    """The drawing's attributes and header data (``ingest.extract.dxf_data``); a drawing
    whose tables are damaged keeps its text without them."""
    from ingest.extract import dxf_data

    out: dict[str, Any] = {}
    try:
        out["attributes"] = dxf_data.attributes(doc)
    except (AttributeError, ValueError, TypeError, KeyError, IndexError):
        out["attributes"] = []
    try:
        out["drawing"] = dxf_data.drawing(doc)
    except (AttributeError, ValueError, TypeError, KeyError, IndexError):
        out["drawing"] = {"acadver": doc.dxfversion}
    return out


def _header_value(data: bytes, name: str) -> str | None:
    """A header variable's value as the (ASCII) file has it, before ezdxf touches it."""
    m = re.search(rb"\$" + name.encode() + rb"\s*\r?\n\s*\d+\s*\r?\n\s*([-0-9.eE+]+)", data[:65536])
    return m.group(1).decode("ascii") if m else None


def _julian(value: Any) -> str | None:
    """``$TDCREATE`` / ``$TDUPDATE`` as an ISO timestamp: AutoCAD's Julian date, whose
    whole part is the day number and fraction the local time of day since midnight."""
    from datetime import UTC, datetime, timedelta

    try:
        days = float(value)
    except (TypeError, ValueError):
        return None
    if days < 2_400_000 or days > 2_600_000:  # unset (0) or nonsense
        return None
    when = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=days - 2440588.0)
    return when.replace(tzinfo=None).isoformat(timespec="seconds")
