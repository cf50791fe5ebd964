"""DWG drawings give what the same drawing saved as DXF gives: the same text lines, the same
pages, the same (tag, value) pairs and attribute rows, the same drawing data.

R2000 to R2018 are one drawing AutoCAD saved in each release and as DXF, and R14 the same
drawing AutoCAD saved as R14 (``tests/fixtures/dwg/SOURCES.md``); an R2000 drawing is also
generated here twice from one description, once as DWG (ezdwg's writer) and once as DXF
(ezdxf). Older DWG (a real R12 drawing, and the magic of older ones) is refused by its
version; a truncated
or damaged one is a ``failed`` row from the isolated workers, under a run's pool limits.
"""

from __future__ import annotations

import functools
import lzma
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ingest.extract import extract_by_head, extract_document
from ingest.extract.base import Extraction
from ingest.extract.batch import extract_batch, pool_config
from ingest.extract.dxf import extract_drawing, read_drawing
from ingest.extract.pool import WorkerPool
from ingest.settings import Settings

DWG_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "dwg"
# (the DWG's version, its release, the DXF it is compared with): AutoCAD's R2000 DXF for
# its R2000 DWG, its R2004 DXF for the later releases.
RELEASES = [
    ("AC1015", "R2000", "AC1015"),
    ("AC1018", "R2004", "AC1018"),
    ("AC1021", "R2007", "AC1018"),
    ("AC1024", "R2010", "AC1018"),
    ("AC1027", "R2013", "AC1018"),
    ("AC1032", "R2018", "AC1018"),
]
# The drawing's one multi-line attribute: R2018 keeps it; AutoCAD, saving the drawing in an
# earlier release (each DXF compared with), renamed its tag, as releases before R2018 have
# none.
R2018_TAG, R2004_TAG = "MULTI_LINE_ATT", "MULTI_LINE_ATT_001"
R12_DRAWING = DWG_FIXTURES / "cad-format-dwg-ac1009_TEXT1.dwg"  # AC1009: one TEXT, "FOO"
R12_ERROR = "DWG R12 (AC1009): not readable; save it as DXF or a newer DWG"


def unpack(name: str, into: Path) -> Path:
    path = into / name.removesuffix(".xz")
    path.write_bytes(lzma.decompress((DWG_FIXTURES / name).read_bytes()))
    return path


@functools.cache
def dxf_reading(version: str) -> Extraction:
    """ezdxf's reading of the drawing AutoCAD saved as DXF of ``version``, less its
    MULTILEADER entities: ezdwg does not read those (the only entity with text a DXF
    gives and a DWG does not)."""
    packed = DWG_FIXTURES / f"acadsharp_sample_{version}_ascii.dxf.xz"
    doc, warnings = read_drawing(lzma.decompress(packed.read_bytes()))
    assert not warnings
    for layout in [*doc.layouts, *doc.blocks]:
        for entity in list(layout.query("MULTILEADER")):
            layout.delete_entity(entity)
    return extract_drawing(doc, kind="dxf", extractor="ezdxf")


def lines(text: str, version: str) -> Counter[str]:
    out = Counter(text.split("\n"))
    if version == "AC1032":
        for line in list(out):
            if line.startswith(R2018_TAG + ":"):
                out[R2004_TAG + line[len(R2018_TAG) :]] += out.pop(line)
    return out


def attribute_rows(x: Extraction, version: str) -> list[tuple[Any, ...]]:
    rows = []
    for layout, block, tag, value, layer, ix, iy, iz, handle in x.structure["attributes"]:
        if version == "AC1032" and tag == R2018_TAG:
            tag = R2004_TAG
        rows.append((layout, block, tag, value, layer, round(ix, 6), round(iy, 6), iz, handle))
    return sorted(rows)


@pytest.mark.parametrize(("version", "release", "dxf_version"), RELEASES)
def test_a_dwg_gives_what_the_same_drawing_as_dxf_gives(
    tmp_path: Path, version: str, release: str, dxf_version: str
) -> None:
    path = unpack(f"acadsharp_sample_{version}.dwg.xz", tmp_path)
    got = extract_document(path)
    want = dxf_reading(dxf_version)
    assert (got.kind, got.status, got.extractor, got.error) == ("dwg", "ok", "ezdwg", None)
    assert "warnings" not in got.metadata  # no entity refused by the model

    assert lines(got.text, version) == lines(want.text, "")
    assert len(got.structure["pages"]) == len(want.structure["pages"]) == 4
    for mine, theirs in zip(got.structure["pages"], want.structure["pages"], strict=True):
        assert lines(mine, version) == lines(theirs, "")
    # the text that matters, by kind: MTEXT as plain text, ATTRIB values, dimensions
    assert "this is a Mtext" in got.text and "\\P" not in got.text
    assert "PRESET_ATT: hello" in got.text and "∅45,6" in got.text

    pairs = sorted((r[2], r[3]) for r in attribute_rows(got, version))
    assert pairs == sorted((r[2], r[3]) for r in attribute_rows(want, ""))
    assert (R2004_TAG, "my multi line text for the attrrib") in pairs
    assert attribute_rows(got, version) == attribute_rows(want, "")  # layout, block, layer...

    mine, theirs = got.structure["drawing"], want.structure["drawing"]
    assert (mine["acadver"], mine["release"]) == (version, release)
    for key in ("insunits", "units", "layouts", "text_heights"):
        assert mine[key] == theirs[key], key
    assert mine["units"] == "inches"
    # What AutoCAD's saves differ in (each release's DXF, read by ezdxf, differs alike): a
    # dynamic block's definition is kept from R2010 on, R2000 and R2004 keep only its
    # anonymous copies; R2000 to R2007 keep two layers of an inserted drawing ("... @ 1").
    later = version >= "AC1024"
    dynamic = {"my-dynamic-block"} if later else set()
    inserted = {"0 @ 1", "Layer_color_80 @ 1"} if later else set()
    assert sorted(mine["blocks"]) == sorted({*theirs["blocks"], *dynamic})
    assert sorted(mine["layers"]) == sorted(set(theirs["layers"]) - inserted)
    assert got.metadata["layouts"] == ["Model", "Layout1", "Layout2", "MyLayout"]
    assert got.metadata["entities"] == want.metadata["entities"]
    low, high = got.metadata["extents"]
    assert [*low, *high] == pytest.approx(
        [*want.metadata["extents"][0], *want.metadata["extents"][1]]
    )
    assert got.metadata["dxf_version"] == version and got.pages == 4
    assert got.metadata["codepage"] == want.metadata["codepage"] == "ANSI_1252"
    # text is UTF-8 from R2007 on, in the code page before (as for DXF)
    assert got.metadata["encoding"] == ("utf-8" if version >= "AC1021" else "cp1252")
    assert got.metadata["page_count"] == 4  # the common metadata (ingest.extract.metadata)
    assert got.structure.get("markdown") == want.structure.get("markdown")  # none for drawings


def test_an_r14_dwg_gives_the_text_and_attributes_of_the_drawing_as_dxf(tmp_path: Path) -> None:
    """R14 (AC1014, read into the R2000 model ezdxf starts at): the same text, pages and
    attributes as the drawing's R2004 DXF. AutoCAD itself, saving R14, upper-cased the
    names of blocks and layers and replaced " @ " (not allowed in R14 names); R14 has no
    units variable, so the units are unknown rather than the model's default."""
    got = extract_document(unpack("acadsharp_sample_AC1014.dwg.xz", tmp_path))
    want = dxf_reading("AC1018")
    assert (got.kind, got.status, got.extractor, got.error) == ("dwg", "ok", "ezdwg", None)
    assert "warnings" not in got.metadata
    assert (got.metadata["dxf_version"], got.metadata["release"]) == ("AC1014", "R14")
    assert lines(got.text, "AC1014") == lines(want.text, "")
    for mine, theirs in zip(got.structure["pages"], want.structure["pages"], strict=True):
        assert lines(mine, "AC1014") == lines(theirs, "")

    def named_as_r14(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        return sorted((r[0], r[1].upper(), *r[2:4], r[4].upper(), *r[5:]) for r in rows)

    assert named_as_r14(attribute_rows(got, "")) == named_as_r14(attribute_rows(want, ""))
    assert sorted((r[2], r[3]) for r in attribute_rows(got, "")) == sorted(
        (r[2], r[3]) for r in attribute_rows(want, "")
    )
    mine, theirs = got.structure["drawing"], want.structure["drawing"]
    assert (mine["acadver"], mine["release"]) == ("AC1014", "R14")
    assert (mine["insunits"], mine["units"]) == (None, "")  # theirs: inches, set in R2004
    # (case aside: AutoCAD keeps "Defpoints" as it is)
    assert sorted(n.upper() for n in mine["layers"]) == sorted(
        n.upper().replace(" @ ", "___") for n in theirs["layers"]
    )
    assert sorted(mine["blocks"]) == sorted(n.upper() for n in theirs["blocks"])
    for key in ("layouts", "text_heights"):
        assert mine[key] == theirs[key], key
    assert got.metadata["entities"] == want.metadata["entities"]
    assert "extents" not in got.metadata  # ezdwg reads no $EXTMIN/$EXTMAX of R14
    assert (got.metadata["codepage"], got.metadata["encoding"]) == ("ANSI_1252", "cp1252")


# ------------------------------------------------------------------------- R2000, generated

MTEXT = "{\\fArial|b1;Valve} V-101\\PCheck \\Lposition\\l"


def r2000_pair(into: Path) -> tuple[Path, Path]:
    """One drawing written as DWG R2000 by ezdwg and as DXF R2000 by ezdxf: a note on a
    layer, an MTEXT with formatting codes, a door tag block (its own TEXT and an
    attribute) placed twice, a dimension, and a title block and a label on the sheet."""
    import ezdwg
    import ezdxf

    dwg = ezdwg.new()
    dwg.layers["A-ANNO"] = {"color_index": 1}
    dwg.header["insunits"] = 4
    msp = dwg.modelspace()
    msp.add_text("GENERAL NOTES", (0, 0), 2.5, layer="A-ANNO")
    msp.add_mtext(MTEXT, (0, 10), 2.5)
    tag = dwg.blocks.new("DOOR_TAG")
    tag.add_text("DOOR", (0, 3), 1.0)
    tag.add_attdef("NO", "D-?", (0, 0), 1.0)
    for i, no in enumerate(("D-101", "D-102")):
        ref = msp.add_blockref("DOOR_TAG", (100 + 10 * i, 0, 0))
        msp.add_attrib(ref, "NO", no, (100 + 10 * i, 0, 0), 1.0)
    msp.add_linear_dim((0, -20), (0, -10), (600, -10))
    dwg.set_paper(420, 297)
    psp = dwg.paperspace()
    title = dwg.blocks.new("TITLE")
    title.add_attdef("DWGNO", "", (0, 0), 2.5)
    ref = psp.add_blockref("TITLE", (400, 20, 0))
    psp.add_attrib(ref, "DWGNO", "A-101", (400, 20, 0), 2.5)
    psp.add_text("Sheet A1", (10, 5), 5)
    dwg_path = into / "generated.dwg"
    dwg.save(str(dwg_path))

    dxf = ezdxf.new("R2000")
    dxf.header["$INSUNITS"] = 4
    dxf.layers.add("A-ANNO")
    msp = dxf.modelspace()
    msp.add_text("GENERAL NOTES", dxfattribs={"insert": (0, 0), "height": 2.5, "layer": "A-ANNO"})
    msp.add_mtext(MTEXT, dxfattribs={"insert": (0, 10), "char_height": 2.5})
    tag = dxf.blocks.new("DOOR_TAG")
    tag.add_text("DOOR", dxfattribs={"insert": (0, 3), "height": 1.0})
    tag.add_attdef("NO", (0, 0), "D-?", dxfattribs={"height": 1.0})
    for i, no in enumerate(("D-101", "D-102")):
        ref = msp.add_blockref("DOOR_TAG", (100 + 10 * i, 0, 0))
        ref.add_attrib("NO", no, (100 + 10 * i, 0, 0), dxfattribs={"height": 1.0})
    msp.add_linear_dim(base=(0, -20), p1=(0, -10), p2=(600, -10)).render()
    psp = dxf.layouts.get("Layout1")
    title = dxf.blocks.new("TITLE")
    title.add_attdef("DWGNO", (0, 0), "", dxfattribs={"height": 2.5})
    ref = psp.add_blockref("TITLE", (400, 20, 0))
    ref.add_attrib("DWGNO", "A-101", (400, 20, 0), dxfattribs={"height": 2.5})
    psp.add_text("Sheet A1", dxfattribs={"insert": (10, 5), "height": 5})
    dxf_path = into / "generated.dxf"
    dxf.saveas(dxf_path)
    return dwg_path, dxf_path


def test_a_generated_r2000_dwg_gives_what_its_dxf_gives(tmp_path: Path) -> None:
    dwg_path, dxf_path = r2000_pair(tmp_path)
    got, want = extract_document(dwg_path), extract_document(dxf_path)
    assert (got.kind, got.status, got.extractor) == ("dwg", "ok", "ezdwg")
    assert got.text == want.text  # in the same order, too
    assert got.text.split("\n") == [
        "GENERAL NOTES",
        "Valve V-101",  # the MTEXT's formatting codes stripped, as for a DXF
        "Check position",
        "NO: D-101",
        "DOOR",  # the block's own text, once
        "NO: D-102",
        "600",  # the dimension's measurement
        "",
        "DWGNO: A-101",  # the sheet: title block and label
        "Sheet A1",
    ]
    assert got.structure["pages"] == want.structure["pages"]
    assert [r[:8] for r in got.structure["attributes"]] == [
        r[:8] for r in want.structure["attributes"]
    ]
    mine, theirs = got.structure["drawing"], want.structure["drawing"]
    for key in ("acadver", "release", "insunits", "units", "layers", "layouts", "text_heights"):
        assert mine[key] == theirs[key], key
    assert (mine["acadver"], mine["units"]) == ("AC1015", "millimeters")
    # ezdxf's renderer adds the arrow block of the dimension it draws; ezdwg's does not
    assert sorted(mine["blocks"]) == sorted(set(theirs["blocks"]) - {"_CLOSEDFILLED"})


def test_dimension_overrides_and_measurements_as_the_dxf_gives_them(tmp_path: Path) -> None:
    import ezdwg
    import ezdxf

    dims = [((0, -20), 600, "<> mm"), ((0, -40), 250, "CLEAR"), ((0, -60), 125, "<>")]
    dwg = ezdwg.new()
    dxf = ezdxf.new("R2000")
    for (x, y), length, text in dims:
        dwg.modelspace().add_linear_dim((x, y), (x, y + 10), (x + length, y + 10), text=text)
        dxf.modelspace().add_linear_dim(
            base=(x, y), p1=(x, y + 10), p2=(x + length, y + 10), text=text
        ).render()
    dwg.save(str(tmp_path / "dims.dwg"))
    dxf.saveas(tmp_path / "dims.dxf")
    got = extract_document(tmp_path / "dims.dwg")
    want = extract_document(tmp_path / "dims.dxf")
    assert got.text == want.text == "600 mm\nCLEAR\n125"
    assert got.metadata["entities"] == want.metadata["entities"] == {"DIMENSION": 3}


def test_korean_text_of_an_r2000_dwg_in_its_code_page(tmp_path: Path) -> None:
    import ezdwg

    drawing = ezdwg.new()
    drawing.modelspace().add_text("배관 도면 검토 결과 밸브 위치를 재확인할 것", (0, 0), 2.5)
    drawing.modelspace().add_mtext("{\\fBatang|b1;밸브} V-101\\P위치 확인", (0, 10), 2.5)
    path = tmp_path / "korean.dwg"
    drawing.save(str(path))
    got = extract_document(path)
    assert got.text.split("\n") == [
        "배관 도면 검토 결과 밸브 위치를 재확인할 것",
        "밸브 V-101",
        "위치 확인",
    ]
    assert (got.metadata["codepage"], got.metadata["encoding"]) == ("ANSI_949", "cp949")
    assert got.metadata["language"] == "ko"


# -------------------------------------------------------------------- refused, and failed


def test_a_real_r12_dwg_is_unsupported_naming_its_version_and_what_to_do(tmp_path: Path) -> None:
    data = R12_DRAWING.read_bytes()
    assert data[:6] == b"AC1009" and b"FOO" in data  # its one TEXT, which is not read
    for x in (extract_document(R12_DRAWING), extract_document(data, "TEXT1.DWG")):
        assert (x.kind, x.status, x.error, x.text) == ("dwg", "unsupported", R12_ERROR, "")
    settled = extract_by_head(R12_DRAWING)  # no worker needed: the first bytes decide
    assert settled is not None and (settled.status, settled.error) == ("unsupported", R12_ERROR)


@pytest.mark.parametrize(
    ("magic", "release"),
    [
        (b"AC1009", "R12"),
        (b"AC1006", "R10"),
        (b"AC1004", "R9"),
        (b"AC1001", "R2.22"),
        (b"AC2.10", "R2.10"),
        (b"AC1.50", "R2.05"),
        (b"AC1.40", "R1.4"),
        (b"AC1.2", "R1.2"),
        (b"MC0.0", "R1.0"),
    ],
)
def test_an_older_dwg_is_unsupported_naming_its_version(
    tmp_path: Path, magic: bytes, release: str
) -> None:
    """Each is known by its first bytes (the magic, then the zeros of its header), with
    or without a name that says DWG."""
    data = magic + bytes(range(256)) * 40
    message = f"DWG {release} ({magic.decode()}): not readable; save it as DXF or a newer DWG"
    for name in ("old.dwg", "old"):
        path = tmp_path / name
        path.write_bytes(data)
        for x in (extract_document(path), extract_document(data, name)):
            assert (x.kind, x.status, x.error) == ("dwg", "unsupported", message), name
        settled = extract_by_head(path, name)  # no worker needed: the first bytes decide
        assert settled is not None, name
        assert (settled.kind, settled.status, settled.error) == ("dwg", "unsupported", message)


def test_a_text_file_that_starts_like_an_old_dwg_magic_is_text() -> None:
    x = extract_document(b"AC1.50 pump, AC1.40 valve\n" * 20, "notes")
    assert (x.kind, x.status) == ("txt", "ok")


def run_rows(tmp_path: Path, files: dict[str, bytes]) -> tuple[dict[str, Any], Any, Any]:
    """The rows of ``files`` through a pool configured as a run configures its own (the
    settings' workers, time and memory limits, the fence), with the pool's counts."""
    settings = Settings(data_dir=tmp_path / "data")
    objects = settings.local_path / "objects"  # where a run's parsers may read
    objects.mkdir(parents=True)
    stored = []
    for i, (name, data) in enumerate(files.items()):
        (objects / name).write_bytes(data)
        stored.append((name, f"etag-{i}", str(objects / name)))
    config = pool_config(settings.extracting)
    with WorkerPool(config) as pool:
        docs = {
            d.key: d for d in extract_batch(settings.extracting, "b", stored, run_id="r", pool=pool)
        }
        return docs, pool.stats, config


def test_truncated_dwgs_are_failed_rows_from_the_workers(tmp_path: Path) -> None:
    r2013 = unpack("acadsharp_sample_AC1027.dwg.xz", tmp_path).read_bytes()
    r2000 = unpack("acadsharp_sample_AC1015.dwg.xz", tmp_path).read_bytes()
    r14 = unpack("acadsharp_sample_AC1014.dwg.xz", tmp_path).read_bytes()
    generated, _ = r2000_pair(tmp_path)
    files = {
        "half-r2013.dwg": r2013[: len(r2013) // 2],
        "head-r2013.dwg": r2013[:3000],
        "half-r2000.dwg": r2000[: len(r2000) // 2],
        "half-r14.dwg": r14[: len(r14) // 2],
        "half-generated-r2000.dwg": generated.read_bytes()[: generated.stat().st_size // 2],
        "whole-r2013.dwg": r2013,
    }
    docs, stats, config = run_rows(tmp_path, files)
    assert config.time_limit == 120 and config.memory_limit_mb == 2048  # the run's defaults
    for name in files.keys() - {"whole-r2013.dwg"}:
        assert (docs[name].kind, docs[name].status) == ("dwg", "failed"), name
        assert (docs[name].error or "").startswith("unreadable DWG: "), name
    assert docs["whole-r2013.dwg"].status == "ok"  # the workers read the next drawing
    assert "Hello this is a single line text" in docs["whole-r2013.dwg"].text
    assert (stats.jobs, stats.crashes, stats.timeouts) == (len(files), 0, 0)


def test_damaged_dwgs_of_every_release_are_rows_never_a_crash(tmp_path: Path) -> None:
    """Bytes flipped at random (seeded) in the AutoCAD drawing of each release: each file is
    a row, read or ``failed`` with ezdwg's error, and no worker crashes or runs out of
    time."""
    rng = random.Random(39)
    files = {}
    for version in ("AC1014", "AC1015", "AC1018", "AC1021", "AC1024", "AC1027", "AC1032"):
        whole = unpack(f"acadsharp_sample_{version}.dwg.xz", tmp_path).read_bytes()
        for i in range(4):
            damaged = bytearray(whole)
            for _ in range(8):
                damaged[rng.randrange(64, 0x10000)] = rng.randrange(256)
            files[f"{version}-{i}.dwg"] = bytes(damaged)
    docs, stats, _ = run_rows(tmp_path, files)
    assert sorted(docs) == sorted(files)
    failed = {k: d.error or "" for k, d in docs.items() if d.status == "failed"}
    assert {d.status for d in docs.values()} <= {"ok", "failed"}
    assert failed and all(e.startswith("unreadable DWG: ") for e in failed.values()), failed
    assert (stats.jobs, stats.crashes, stats.timeouts) == (len(files), 0, 0)


def test_a_dwg_given_as_bytes_reads_as_from_its_path(tmp_path: Path) -> None:
    path, _ = r2000_pair(tmp_path)
    from_path = extract_document(path)
    from_bytes = extract_document(path.read_bytes(), "generated.dwg")
    assert from_bytes.status == "ok" and from_bytes.text == from_path.text


def test_a_path_read_again_with_new_content_gives_the_new_drawing(tmp_path: Path) -> None:
    """ezdwg keeps what it decoded in caches keyed by path, and a worker may read the next
    night's version of a key at the same path: it reads the new drawing."""
    import ezdwg

    path = tmp_path / "plan.dwg"
    for note in ("FIRST ISSUE", "SECOND ISSUE"):
        drawing = ezdwg.new()
        drawing.modelspace().add_text(note, (0, 0), 2.5)
        drawing.save(str(path))
        assert extract_document(path).text == note
