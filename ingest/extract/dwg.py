"""DWG drawings (AutoCAD's own format) read with ezdwg into the drawing model DXF uses.

ezdwg (a Rust reader of DWG R13 to R2018, AC1012 to AC1032) decodes the entities,
tables and header; this module places what carries text into an ezdxf document, the
model ``ingest.extract.dxf`` reads a DXF into, so a DWG gets exactly the text, pages,
attributes and drawing data a DXF gets, from the same walk:

* the layers, the layouts (model space, then the paper space sheets in tab order), the
  named blocks and the anonymous blocks of dimensions;
* TEXT, MTEXT (its raw text with the formatting codes, which ezdxf's ``plain_text``
  strips as it does a DXF's), ATTDEF, INSERT and MINSERT with their ATTRIBs, DIMENSION
  (override, measurement and the block that shows it), each in its layout or block;
* ``$INSUNITS`` (R13 and R14 predate it: their units are unknown, not the new model's
  default), ``$EXTMIN`` and ``$EXTMAX`` (ezdwg gives none for R14: no extents); the code
  page from the file header (ezdwg has decoded the text with it already: the metadata
  says which it was).

Geometry is not copied: no line, arc or hatch carries text. ezdwg does not read
MULTILEADER entities, so their text, which a DXF gives, is missing from a DWG.

Older drawings (R1.4 to R12) are ``unsupported`` with a message that says what to do;
a damaged file is an error of ezdwg (or a panic of its Rust core), which becomes the
document's ``failed`` row in the worker that read it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ingest.extract.base import ExtractError, Extraction, UnsupportedFormatError

# The versions ezdwg reads, with the release each is known by.
READABLE = {
    "AC1012": "R13",
    "AC1014": "R14",
    "AC1015": "R2000",
    "AC1018": "R2004",
    "AC1021": "R2007",
    "AC1024": "R2010",
    "AC1027": "R2013",
    "AC1032": "R2018",
}
# Older releases, by the magic their files start with (R9 on as ezdxf names them; R11
# and R12 share AC1009, known as R12).
OLDER = {
    "MC0.0": "R1.0",
    "AC1.2": "R1.2",
    "AC1.40": "R1.4",
    "AC1.50": "R2.05",
    "AC2.10": "R2.10",
    "AC1001": "R2.22",
    "AC1002": "R2.50",
    "AC1003": "R2.60",
    "AC1004": "R9",
    "AC1006": "R10",
    "AC1009": "R12",
}
# The code page a DWG's file header names (a 16-bit number at offset 0x13), as DXF's
# $DWGCODEPAGE names it: the text of drawings before R2007 is in it. The numbers are
# those ezdwg reads and writes (``ezdwg.WRITE_CODEPAGES``); another is left unnamed.
CODEPAGES = {
    28: "ANSI_1250",
    29: "ANSI_1251",
    30: "ANSI_1252",
    32: "ANSI_1253",
    33: "ANSI_1254",
    34: "ANSI_1255",
    35: "ANSI_1256",
    36: "ANSI_1257",
    37: "ANSI_874",
    38: "ANSI_932",
    39: "ANSI_936",
    40: "ANSI_949",
    41: "ANSI_950",
}
# ezdxf writes R13 and R14 drawings as R2000: its model starts there.
_MODEL_VERSION = {"AC1012": "AC1015", "AC1014": "AC1015"}
_TYPES = "TEXT MTEXT ATTRIB ATTDEF INSERT MINSERT DIMENSION"
_DIMTYPES = {
    "LINEAR": 0,
    "ALIGNED": 1,
    "ANG2LN": 2,
    "DIAMETER": 3,
    "RADIUS": 4,
    "ANG3PT": 5,
    "ORDINATE": 6,
}


def dwg_version(head: bytes) -> str:
    """The version magic a DWG file starts with (``AC1032``, ``AC1009``, ``AC1.50`` ...)."""
    magic = head[:6].decode("ascii", "replace")
    for older in OLDER:
        if magic.startswith(older):
            return older
    return magic


def check_version(head: bytes) -> str:
    """The version of a drawing ezdwg reads; ``UnsupportedFormatError`` for any other,
    naming the release and what to do."""
    version = dwg_version(head)
    if version in READABLE:
        return version
    if version in OLDER:
        raise UnsupportedFormatError(
            f"DWG {OLDER[version]} ({version}): not readable; save it as DXF or a newer DWG"
        )
    raise UnsupportedFormatError(
        f"DWG of an unknown version ({version!r}): not readable; save it as DXF or as "
        "a DWG of R13 to R2018"
    )


def extract_dwg(source: bytes | Path) -> Extraction:
    """A DWG's text and drawing data, as ``ingest.extract.dxf.extract_dxf`` gives a DXF's."""
    from ezdxf.tools.codepage import toencoding

    from ingest.extract.dxf import UTF8_FROM, extract_drawing

    with _on_disk(source) as path:
        with path.open("rb") as f:
            head = f.read(0x15)
        version = check_version(head)
        doc, handles, skipped = read_dwg(path)
    warnings = [f"{len(skipped)} entities not read: " + "; ".join(skipped[:5])] if skipped else []
    result = extract_drawing(doc, kind="dwg", extractor="ezdwg", warnings=warnings)
    for row in result.structure.get("attributes") or []:
        row[8] = handles.get(row[8], row[8])  # the INSERT's handle in the DWG, as DXF has it
    # The model's code page is ezdxf's default; the file's header says which it is.
    codepage = CODEPAGES.get(int.from_bytes(head[0x13:0x15], "little"))
    result.metadata.pop("codepage", None)
    if codepage:
        result.metadata["codepage"] = codepage
    if version < UTF8_FROM:
        result.metadata["encoding"] = toencoding(codepage) if codepage else None
    if version in _MODEL_VERSION:  # the model says AC1015: say what the file is
        release = READABLE[version]
        result.metadata.update(dxf_version=version, release=release)
        result.structure["drawing"].update(acadver=version, release=release)
    return result


@contextmanager
def _on_disk(source: bytes | Path) -> Iterator[Path]:
    """ezdwg reads files by path: bytes are written to a temporary file first."""
    if isinstance(source, Path):
        yield source
        return
    fd, name = tempfile.mkstemp(suffix=".dwg")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(source)
        yield Path(name)
    finally:
        os.unlink(name)


def read_dwg(path: Path) -> tuple[Any, dict[str, str], list[str]]:
    """An ezdxf document with what of the DWG at ``path`` carries text (see the module),
    the DWG's handle of each INSERT by the document's, and the entities it refused.

    ezdwg keeps its decoded tables in caches keyed by path: they are cleared before (a
    worker reads the next file at a path an earlier one had) and after (a worker reads
    thousands of files) each drawing."""
    import ezdwg

    ezdwg.clear_decode_caches()
    try:
        builder = _Builder(ezdwg.read(str(path)))
        return builder.build(), builder.handles, builder.skipped
    except (ExtractError, MemoryError, KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:  # ezdwg's errors, and a panic of its Rust core
        raise ExtractError(f"unreadable DWG: {type(exc).__name__}: {exc}"[:2000]) from exc
    finally:
        ezdwg.clear_decode_caches()


class _Builder:
    """Builds the ezdxf document of one ezdwg ``Document``."""

    def __init__(self, source: Any) -> None:
        import ezdxf

        self.source = source
        self.path = source.decode_path or source.path
        self.doc = ezdxf.new(dxfversion=_MODEL_VERSION.get(source.version, source.version))
        self.layer_names: dict[int, str] = {}
        self.owners: dict[int, Any] = {}  # block record handle -> ezdxf layout or block
        self.inserts: dict[int, Any] = {}  # INSERT handle -> the ezdxf INSERT
        self.handles: dict[str, str] = {}  # the model's INSERT handle -> the DWG's
        self.skipped: list[str] = []  # entities the model refused, with why

    def build(self) -> Any:
        self._header()
        self._layers()
        default_paper = self._layouts()
        self._blocks()
        entities = sorted(self.source.entities().query(_TYPES), key=lambda e: int(e.handle))
        attribs = []
        for entity in entities:
            if entity.dxftype == "ATTRIB":
                attribs.append(entity)
                continue
            owner = self._owner(entity, default_paper)
            if owner is not None:
                self._guarded(self._add, owner, entity)
        for attrib in attribs:
            insert = self.inserts.get(int(attrib.dxf.get("owner_handle") or 0))
            if insert is not None:
                self._guarded(self._add_attrib, insert, attrib)
        return self.doc

    def _guarded(self, add: Any, owner: Any, entity: Any) -> None:
        """One entity whose values the model refuses costs that entity, not the drawing
        (as one malformed entity of a DXF costs its own text only)."""
        from ezdxf.lldxf.const import DXFError

        try:
            add(owner, entity)
        except (DXFError, ValueError, TypeError, KeyError, IndexError) as exc:
            self.skipped.append(f"{entity.dxftype} {int(entity.handle):X}: {exc}")

    def _header(self) -> None:
        header = self.source.header_variables()
        if header.get("insunits") is not None:
            self.doc.header["$INSUNITS"] = int(header["insunits"])
        else:  # R13 and R14 have none: unknown, not ezdxf.new's default (meters)
            del self.doc.header["$INSUNITS"]
        for name in ("extmin", "extmax"):
            point = header.get(name)
            if point is not None and len(point) == 3:
                self.doc.header["$" + name.upper()] = tuple(float(v) for v in point)

    def _layers(self) -> None:
        from ezdwg import raw

        for handle, name in raw.decode_layer_names(self.path):
            self.layer_names[int(handle)] = name
            if name and name not in self.doc.layers:
                self.doc.layers.add(name)

    def _layouts(self) -> Any:
        """The paper space sheets in tab order; returns the sheet of the entities stored
        without an owner (the active one, whose block is ``*Paper_Space``)."""
        table = self.source.layouts()
        sheets = sorted(
            ((name, entry) for name, entry in table.items() if not entry["model"]),
            key=lambda item: item[1]["tab_order"],
        )
        for entry in table.values():
            if entry["model"]:
                self.owners[int(entry["block_record_handle"])] = self.doc.modelspace()
        default = self.doc.layouts.get("Layout1")
        made = []
        for i, (name, entry) in enumerate(sheets):
            if i == 0 and name != "Layout1":
                self.doc.layouts.rename("Layout1", name)
                layout = self.doc.layouts.get(name)
            elif i == 0:
                layout = default
            elif name in self.doc.layouts:
                continue
            else:
                layout = self.doc.layouts.new(name)
            made.append((entry, layout))
            self.owners[int(entry["block_record_handle"])] = layout
        active = [layout for entry, layout in made if entry.get("active")]
        if active:
            return active[0]
        return made[0][1] if made else default

    def _blocks(self) -> None:
        from ezdwg import raw

        for handle, name in raw.decode_block_header_names(self.path):
            if not name or int(handle) in self.owners:
                continue
            upper = name.upper()
            if upper.startswith(("*MODEL_SPACE", "*PAPER_SPACE")):
                continue
            block = self.doc.blocks.get(name)
            if block is None:
                block = self.doc.blocks.new(name)
            self.owners[int(handle)] = block

    def _owner(self, entity: Any, default_paper: Any) -> Any:
        """Where an entity lives, by its stored placement: ``entmode`` 2 is model space,
        1 the active sheet, 0 the block record (a block, or another sheet) it names."""
        placement = self.source.entity_placement(entity.handle)
        mode, owner = placement if placement is not None else (None, None)
        if mode == 2:
            return self.doc.modelspace()
        if mode == 1:
            return default_paper
        if owner is None:
            owner = entity.dxf.get("owner_handle")
        if owner is not None and int(owner) in self.owners:
            return self.owners[int(owner)]
        if owner is None:
            return self.doc.modelspace()  # placement unknown: kept, as ezdwg keeps it
        return None  # owned by something this model does not hold

    def _attribs(self, entity: Any) -> dict[str, Any]:
        dxf = entity.dxf
        out: dict[str, Any] = {}
        layer = self.layer_names.get(int(dxf.get("layer_handle") or -1))
        if layer:
            out["layer"] = layer
        return out

    def _add(self, owner: Any, entity: Any) -> None:
        dxf = entity.dxf
        kind = entity.dxftype
        attribs = self._attribs(entity)
        if kind == "TEXT":
            attribs.update(_text_attribs(dxf))
            owner.add_text(dxf.get("text") or "", dxfattribs=attribs)
        elif kind == "MTEXT":
            attribs["insert"] = dxf.get("insert") or (0, 0, 0)
            _copy(attribs, dxf, "char_height", float, zero=False)
            if dxf.get("rect_width"):
                attribs["width"] = float(dxf["rect_width"])
            _copy(attribs, dxf, "attachment_point", int, zero=False)
            text = dxf.get("raw_text") or dxf.get("text") or ""
            owner.add_mtext(text, dxfattribs=attribs)
        elif kind == "ATTDEF":
            attribs.update(_text_attribs(dxf))
            attribs["flags"] = int(dxf.get("attribute_flags") or 0)
            owner.add_attdef(dxf.get("tag") or "", text=dxf.get("text") or "", dxfattribs=attribs)
        elif kind in ("INSERT", "MINSERT"):
            name = dxf.get("name")
            if not name or name not in self.doc.blocks:
                return
            insert = dxf.get("insert") or (0, 0, 0)
            _copy(attribs, dxf, "xscale yscale zscale rotation", float)
            # a MINSERT's array
            _copy(attribs, dxf, "column_count row_count", int, zero=False)
            _copy(attribs, dxf, "column_spacing row_spacing", float, zero=False)
            ref = owner.add_blockref(name, insert, attribs)
            self.inserts[int(entity.handle)] = ref
            self.handles[ref.dxf.handle] = f"{int(entity.handle):X}"
        elif kind == "DIMENSION":
            self._add_dimension(owner, dxf, attribs)

    def _add_dimension(self, owner: Any, dxf: dict[str, Any], attribs: dict[str, Any]) -> None:
        dimtype = _DIMTYPES.get(str(dxf.get("dimtype", "")).upper(), 0)
        block = dxf.get("anonymous_block_name")
        if block and block in self.doc.blocks:
            attribs["geometry"] = block
            dimtype |= 32  # the block shows this dimension
        attribs["dimtype"] = dimtype
        _copy(attribs, dxf, "defpoint defpoint2 defpoint3 text_midpoint defpoint4 defpoint5")
        _copy(attribs, dxf, "angle", float)
        attribs["text"] = dxf.get("text") or ""
        _copy(attribs, dxf, "actual_measurement", float)
        owner.new_entity("DIMENSION", dxfattribs=attribs)

    def _add_attrib(self, insert: Any, entity: Any) -> None:
        dxf = entity.dxf
        attribs = self._attribs(entity)
        attribs.update(_text_attribs(dxf))
        insert.add_attrib(dxf.get("tag") or "", dxf.get("text") or "", dxfattribs=attribs)


def _text_attribs(dxf: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"insert": dxf.get("insert") or (0, 0, 0)}
    _copy(out, dxf, "height rotation width oblique", float)
    _copy(out, dxf, "halign valign", int, zero=False)
    _copy(out, dxf, "align_point")
    return out


def _copy(
    out: dict[str, Any],
    dxf: dict[str, Any],
    names: str,
    cast: Callable[[Any], Any] | None = None,
    *,
    zero: bool = True,
) -> None:
    """``out[name] = cast(dxf[name])`` for each of ``names`` (space-separated) the ezdwg
    entity holds; ``zero`` false: a zero or empty value counts as not held."""
    for name in names.split():
        value = dxf.get(name)
        if value is not None and (zero or value):
            out[name] = value if cast is None else cast(value)
