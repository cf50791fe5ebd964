"""A drawing as data: the ATTRIB values of its block references, and what its header says.

``dxf_attributes`` gets one row per ATTRIB of every INSERT placed in model space or in a
paper space layout (a title block is an INSERT whose ATTRIBs carry the drawing number,
scale, author...): the block's name, the tag, the value as shown, the layer and the
insert's position. ``dxf_drawings`` gets one row per drawing: ``$ACADVER``, the units
(``$INSUNITS``), the layer names, the block names (anonymous ``*`` blocks left out) and
the distinct text heights of TEXT, MTEXT and ATTRIB entities.

Both are read in the worker from the drawing ``ingest.extract.dxf`` has loaded, and
sent back as plain lists with the text (see ``Extraction.structure``).
"""

from __future__ import annotations

import re
from typing import Any

# $INSUNITS codes (DXF reference, HEADER section).
UNITS = {
    0: "unitless",
    1: "inches",
    2: "feet",
    3: "miles",
    4: "millimeters",
    5: "centimeters",
    6: "meters",
    7: "kilometers",
    8: "microinches",
    9: "mils",
    10: "yards",
    11: "angstroms",
    12: "nanometers",
    13: "microns",
    14: "decimeters",
    15: "decameters",
    16: "hectometers",
    17: "gigameters",
    18: "astronomical units",
    19: "light years",
    20: "parsecs",
    21: "US survey feet",
    22: "US survey inches",
    23: "US survey yards",
    24: "US survey miles",
}
_UNICODE_ESCAPE = re.compile(r"\\U\+([0-9A-Fa-f]{4})")
MAX_ATTRIBUTES = 100_000  # per drawing: the worker's reply stays bounded
_TEXT_TYPES = ("TEXT", "MTEXT", "ATTRIB", "ATTDEF")


def decode_dxf_escapes(text: str) -> str:
    r"""``\U+D3C9`` -> ``평``; ezdxf keeps these escapes of pre-R2007 files as they are."""
    if "\\U+" not in text:
        return text
    return _UNICODE_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), text)


def release(version: str) -> str:
    from ezdxf.lldxf.const import acad_release

    return str(acad_release.get(version, version))


def layout_names(doc: Any) -> list[str]:
    """Model space first, then the paper space layouts in tab order."""
    return ["Model"] + [n for n in doc.layouts.names_in_taborder() if n.lower() != "model"]


def attributes(doc: Any) -> list[list[Any]]:
    """``[layout, block, tag, value, layer, x, y, z, handle]`` for every ATTRIB of every
    INSERT in model space and the paper space layouts, in layout and drawing order."""
    rows: list[list[Any]] = []
    for name in layout_names(doc):
        layout = doc.modelspace() if name == "Model" else doc.layouts.get(name)
        for insert in layout.query("INSERT"):
            block = decode_dxf_escapes(str(insert.dxf.get("name", "")))
            x, y, z = _xyz(insert.dxf.get("insert"))
            layer = decode_dxf_escapes(str(insert.dxf.get("layer", "0")))
            for attrib in insert.attribs:
                if len(rows) >= MAX_ATTRIBUTES:
                    return rows
                rows.append(
                    [
                        name,
                        block,
                        decode_dxf_escapes(str(attrib.dxf.get("tag", ""))),
                        decode_dxf_escapes(_plain(attrib)),
                        layer,
                        x,
                        y,
                        z,
                        str(insert.dxf.get("handle", "")),
                    ]
                )
    return rows


def drawing(doc: Any) -> dict[str, Any]:
    """What the header and tables say about the drawing as a whole."""
    insunits = doc.header.get("$INSUNITS")
    try:
        code = int(insunits) if insunits is not None else None
    except (TypeError, ValueError):
        code = None
    heights: set[float] = set()
    for entity in doc.entitydb.values():
        if entity.is_alive and entity.dxftype() in _TEXT_TYPES:
            h = entity.dxf.get("char_height" if entity.dxftype() == "MTEXT" else "height")
            if isinstance(h, (int, float)) and h > 0:
                heights.add(round(float(h), 6))
    return {
        "acadver": doc.dxfversion,
        "release": release(doc.dxfversion),
        "insunits": code,
        "units": UNITS.get(code, "") if code is not None else "",
        "layers": [decode_dxf_escapes(layer.dxf.name) for layer in doc.layers],
        "blocks": [
            decode_dxf_escapes(b.name)
            for b in doc.blocks
            if not b.name.startswith("*") and not b.is_any_layout
        ],
        "text_heights": sorted(heights),
        "layouts": layout_names(doc),
    }


def _plain(attrib: Any) -> str:
    try:
        return str(attrib.plain_text())
    except (AttributeError, ValueError, TypeError):
        return str(attrib.dxf.get("text", ""))


def _xyz(point: Any) -> tuple[float | None, float | None, float | None]:
    if point is None:
        return None, None, None
    try:
        x, y, *rest = point
        return float(x), float(y), float(rest[0]) if rest else 0.0
    except (TypeError, ValueError):
        return None, None, None
