"""The structured tables through real s3-ingest flow runs: pages, chunks and drawing
attributes land in the lake, chunk ids stay the same for unchanged documents night after
night, and ``ingest search`` names the page and heading of each hit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from flows.s3_ingest import s3_ingest
from ingest import search
from ingest.extract.structure import CURRENT
from tests.helpers import put_many, rows
from tests.ingest.extract.test_extract_structure import (
    multi_page_pdf,
    styled_word_document,
    title_block_drawing,
)

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def _chunk_ids(data_dir: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for r in rows(
        data_dir,
        f"""SELECT t.key, t.chunk_id FROM document_chunks t JOIN documents d ON {CURRENT}
            ORDER BY t.key, t.position""",
    ):
        out.setdefault(r["key"], []).append(r["chunk_id"])
    return out


def test_structured_tables_through_nightly_runs(s3, s3_server, bucket, data_dir: Path) -> None:
    objects = {
        "in/report.pdf": multi_page_pdf(["site survey", "valve inspection", "signatures"]),
        "in/spec.docx": styled_word_document(),
        "in/plan.dxf": title_block_drawing(),
        "in/notes.txt": "\n\n".join(f"note {i}: pump alignment" for i in range(40)).encode(),
    }
    put_many(s3, bucket, objects)
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    s3_ingest(prefix="in/", **kw)

    pages = rows(data_dir, "SELECT key, page, text FROM document_pages ORDER BY key, page")
    assert [(r["page"], r["text"]) for r in pages if r["key"] == "in/report.pdf"] == [
        (1, "site survey"),
        (2, "valve inspection"),
        (3, "signatures"),
    ]
    scale = rows(
        data_dir,
        "SELECT key FROM dxf_attributes WHERE block = 'TITLE' AND tag = 'SCALE' "
        "AND value = '1:100'",
    )
    assert scale == [{"key": "in/plan.dxf"}]
    md = rows(data_dir, "SELECT markdown FROM documents WHERE key = 'in/spec.docx'")[0]
    assert "| Item | Size | Qty |" in md["markdown"]
    first = _chunk_ids(data_dir)
    assert set(first) == set(objects)

    # The search names the page and the heading of each hit.
    (hit,) = search.search(data_dir, "inspection")
    assert (hit.key, hit.page, hit.heading) == ("in/report.pdf", 2, "")
    (hit,) = search.search(data_dir, "Copper")
    assert (hit.key, hit.page, hit.heading) == ("in/spec.docx", 1, "배관 시방서 > Materials")
    out = CliRunner().invoke(
        app, ["search", "inspection", "--data-dir", str(data_dir), "-f", "json"]
    )
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)[0]["page"] == 2
    out = CliRunner().invoke(app, ["search", "Copper", "--data-dir", str(data_dir), "-f", "json"])
    (found,) = json.loads(out.output)
    assert (found["page"], found["heading"]) == (1, "배관 시방서 > Materials")
    assert len(found["chunk_id"]) == 32
    cited = rows(
        data_dir,
        "SELECT page_start, heading, text FROM document_chunks "
        f"WHERE chunk_id = '{found['chunk_id']}'",
    )
    assert cited[0]["heading"] == found["heading"] and "Copper" in cited[0]["text"]

    # The next night: one document changed; only its chunk ids change.
    s3.put_object(
        Bucket=bucket,
        Key="in/notes.txt",
        Body="\n\n".join(f"note {i}: pump realigned" for i in range(40)).encode(),
    )
    s3_ingest(prefix="in/", **kw)
    second = _chunk_ids(data_dir)
    for key in ("in/report.pdf", "in/spec.docx", "in/plan.dxf"):
        assert second[key] == first[key], key
    assert not set(second["in/notes.txt"]) & set(first["in/notes.txt"])
    notes = rows(
        data_dir,
        f"""SELECT string_agg(t.text, '' ORDER BY t.position) AS text FROM document_chunks t
            JOIN documents d ON {CURRENT} WHERE t.key = 'in/notes.txt'""",
    )
    assert "pump realigned" in notes[0]["text"]


def test_a_pdf_extractor_bump_re_extracts_only_the_pdfs(
    s3, s3_server, bucket, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ingest.extract import provenance

    objects = {
        "in/a.pdf": multi_page_pdf(["alpha"]),
        "in/b.pdf": multi_page_pdf(["beta", "gamma"]),
        "in/plan.dxf": title_block_drawing(),
        "in/notes.txt": b"pump alignment notes",
        "in/spec.docx": styled_word_document(),
    }
    put_many(s3, bucket, objects)
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    s3_ingest(prefix="in/", **kw)
    before = {
        r["key"]: r
        for r in rows(data_dir, "SELECT key, kind, extractor_version, extracted_at FROM documents")
    }
    assert before["in/a.pdf"]["extractor_version"].split()[1] == f"pdf/{provenance.CODE['pdf']}"
    assert "pypdfium2=" in before["in/a.pdf"]["extractor_version"]
    assert "ezdxf=" in before["in/plan.dxf"]["extractor_version"]

    nothing = s3_ingest(prefix="in/", **kw)  # nothing changed: nothing extracted
    assert nothing.extracted == {"unchanged": len(objects)}
    assert nothing.reextracted == {}

    monkeypatch.setitem(provenance.CODE, "pdf", provenance.CODE["pdf"] + 1)  # a new PDF code
    # One PDF's kept file is gone: it is fetched again; the other is read where it is kept.
    kept = rows(data_dir, "SELECT key, local_path FROM s3_objects WHERE key = 'in/a.pdf'")
    if kept[0]["local_path"]:
        Path(kept[0]["local_path"]).unlink(missing_ok=True)
    bumped = s3_ingest(prefix="in/", **kw)
    assert bumped.extracted == {"ok": 2, "unchanged": len(objects) - 2}
    assert kept[0]["local_path"]  # the run keeps its files here
    # b.pdf is read from its kept file; a.pdf, whose file is gone, is downloaded again.
    assert bumped.reextracted == {"pdf extractor changed": 1}
    assert bumped.counts.get("downloaded") == 1
    after = {
        r["key"]: r
        for r in rows(data_dir, "SELECT key, kind, extractor_version, extracted_at FROM documents")
    }
    for key, row in after.items():
        if row["kind"] == "pdf":
            assert row["extracted_at"] > before[key]["extracted_at"], key
            assert f"pdf/{provenance.CODE['pdf']}" in row["extractor_version"]
        else:
            assert row == before[key], key  # the other kinds are not touched
    pages = rows(
        data_dir,
        f"""SELECT t.key, t.page, t.text, t.extractor_version FROM document_pages t
            JOIN documents d ON {CURRENT} WHERE t.key LIKE '%.pdf' ORDER BY t.key, t.page""",
    )
    assert [(r["key"], r["page"], r["text"]) for r in pages] == [
        ("in/a.pdf", 1, "alpha"),
        ("in/b.pdf", 1, "beta"),
        ("in/b.pdf", 2, "gamma"),
    ]
    assert {r["extractor_version"] for r in pages} == {after["in/a.pdf"]["extractor_version"]}


def test_reextract_on_demand_by_kind_and_release(
    s3, s3_server, bucket, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What ``ingest reextract --kind K --since-version X`` runs: the flow with
    ``reextract_kinds`` and ``reextract_since``."""
    from ingest.extract import provenance

    objects = {
        "in/a.pdf": multi_page_pdf(["alpha"]),
        "in/plan.dxf": title_block_drawing(),
        "in/spec.docx": styled_word_document(),
    }
    put_many(s3, bucket, objects)
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    s3_ingest(prefix="in/", **kw)

    # Asked for the drawings extracted by this release or later: the drawing only.
    forced = s3_ingest(prefix="in/", reextract_kinds=["dxf"], reextract_since="2.0", **kw)
    assert forced.extracted == {"ok": 1, "unchanged": 2}
    assert forced.reextracted == {"dxf extracted since 2.0": 1}
    # A release after the one recorded: nothing.
    later = s3_ingest(prefix="in/", reextract_since="99.0", **kw)
    assert later.extracted == {"unchanged": 3}

    # DOCX and PDF extractors both change; asked for PDFs only, the DOCX waits.
    monkeypatch.setitem(provenance.CODE, "pdf", provenance.CODE["pdf"] + 1)
    monkeypatch.setitem(provenance.CODE, "docx", provenance.CODE["docx"] + 1)
    pdfs = s3_ingest(prefix="in/", reextract_kinds=["pdf"], **kw)
    assert pdfs.reextracted == {"pdf extractor changed": 1}
    rest = s3_ingest(prefix="in/", **kw)  # the next night takes the DOCX
    assert rest.reextracted == {"docx extractor changed": 1}


def test_a_deleted_objects_structured_rows_are_marked(
    s3, s3_server, bucket, data_dir: Path
) -> None:
    put_many(
        s3,
        bucket,
        {"in/plan.dxf": title_block_drawing(), "in/b.pdf": multi_page_pdf(["beta", "gamma"])},
    )
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    s3_ingest(prefix="in/", **kw)
    s3.delete_object(Bucket=bucket, Key="in/plan.dxf")
    second = s3_ingest(prefix="in/", **kw)
    assert second.counts == {"deleted": 1, "skipped": 1}
    for table in ("document_pages", "document_chunks", "dxf_attributes", "dxf_drawings"):
        found = rows(data_dir, f"SELECT key, status, count(*) AS n FROM {table} GROUP BY ALL")
        by = {(r["key"], r["status"]): r["n"] for r in found}
        assert ("in/plan.dxf", "ok") not in by, table
        assert by.get(("in/plan.dxf", "deleted")), table
        if table.startswith("document_"):
            assert by[("in/b.pdf", "ok")] >= 2, table
    # Marked once: the next run has nothing more to mark.
    third = s3_ingest(prefix="in/", **kw)
    assert third.counts == {"skipped": 1}
    assert rows(data_dir, "SELECT count(*) AS n FROM dxf_attributes WHERE status = 'deleted'") == [
        {"n": 5}
    ]


def test_reextract_command_checks_its_release_before_running() -> None:
    out = CliRunner().invoke(app, ["reextract", "--bucket", "docs", "--since-version", "two"])
    assert out.exit_code == 2
    assert "not a release number like 2.0: 'two'" in out.output
    helped = CliRunner().invoke(app, ["reextract", "--help"])
    assert helped.exit_code == 0 and "--since-version" in helped.output


def test_dwg_rows_like_dxf_rows_and_last_nights_unsupported_dwgs_read_again(
    s3, s3_server, bucket, data_dir: Path, tmp_path: Path
) -> None:
    """One drawing as DWG and as DXF through the S3 path: ``documents``, the attribute
    and drawing tables and ``ingest search`` hold the DWG as they hold the DXF. Before
    it, a night as it ran before DWG was read (every DWG ``unsupported``, with the
    detection's version string): the next night reads them again."""
    from ingest.extract import dwg, provenance
    from tests.ingest.extract.test_extract_dwg import R12_DRAWING, r2000_pair

    dwg_path, dxf_path = r2000_pair(tmp_path)
    objects = {
        "in/plan.dwg": dwg_path.read_bytes(),
        "in/plan.dxf": dxf_path.read_bytes(),
        "in/old.dwg": R12_DRAWING.read_bytes(),  # R12
    }
    put_many(s3, bucket, objects)
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    with pytest.MonkeyPatch.context() as before:  # the code before DWG was read
        before.setattr(dwg, "READABLE", {})
        before.delitem(provenance.CODE, "dwg")
        before.delitem(provenance.LIBRARIES, "dwg")
        s3_ingest(prefix="in/", **kw)
    old = {
        r["key"]: r for r in rows(data_dir, "SELECT key, status, extractor_version FROM documents")
    }
    assert old["in/plan.dwg"]["status"] == "unsupported"
    assert old["in/plan.dwg"]["extractor_version"] == "2.0 detect/1"

    night = s3_ingest(prefix="in/", **kw)
    assert night.reextracted == {"dwg extractor changed": 2}
    docs = {
        r["key"]: r
        for r in rows(
            data_dir,
            "SELECT key, kind, status, error, text, extractor_version, pages, chars, "
            "needs_ocr, markdown, metadata FROM documents",
        )
    }
    assert (docs["in/plan.dwg"]["kind"], docs["in/plan.dwg"]["status"]) == ("dwg", "ok")
    assert docs["in/plan.dwg"]["text"] == docs["in/plan.dxf"]["text"]
    for column in ("pages", "chars", "needs_ocr", "markdown"):
        assert docs["in/plan.dwg"][column] == docs["in/plan.dxf"][column], column
    dwg_meta, dxf_meta = (json.loads(docs[k]["metadata"]) for k in ("in/plan.dwg", "in/plan.dxf"))
    for field in ("dxf_version", "release", "layouts", "codepage", "encoding", "page_count"):
        assert dwg_meta[field] == dxf_meta[field], field
    assert dwg_meta["layouts"] == ["Model", "Layout1"]
    assert "Valve V-101" in docs["in/plan.dwg"]["text"]
    assert f"dwg/{provenance.CODE['dwg']} ezdwg=" in docs["in/plan.dwg"]["extractor_version"]
    assert docs["in/old.dwg"]["status"] == "unsupported"
    assert docs["in/old.dwg"]["error"] == (
        "DWG R12 (AC1009): not readable; save it as DXF or a newer DWG"
    )

    columns = "layout, block, tag, value, layer, insert_x, insert_y, insert_z"
    attributes = {
        key: rows(
            data_dir,
            f"SELECT {columns} FROM dxf_attributes WHERE key = '{key}' ORDER BY position",
        )
        for key in ("in/plan.dwg", "in/plan.dxf")
    }
    assert attributes["in/plan.dwg"] == attributes["in/plan.dxf"]
    assert [(r["tag"], r["value"]) for r in attributes["in/plan.dwg"]] == [
        ("NO", "D-101"),
        ("NO", "D-102"),
        ("DWGNO", "A-101"),
    ]
    drawings = rows(
        data_dir,
        "SELECT key, acadver, units, layouts, attributes FROM dxf_drawings ORDER BY key",
    )
    assert [(r["key"], r["acadver"], r["units"], r["attributes"]) for r in drawings] == [
        ("in/plan.dwg", "AC1015", "millimeters", 3),
        ("in/plan.dxf", "AC1015", "millimeters", 3),
    ]
    pages = rows(
        data_dir,
        f"""SELECT t.key, t.page, t.text FROM document_pages t JOIN documents d ON {CURRENT}
            WHERE t.key LIKE 'in/plan.%' ORDER BY t.key, t.page""",
    )
    assert [(r["page"], r["text"]) for r in pages if r["key"] == "in/plan.dwg"] == [
        (r["page"], r["text"]) for r in pages if r["key"] == "in/plan.dxf"
    ]
    chunks = rows(
        data_dir,
        f"""SELECT t.key, t.page_start, t.heading, t.text FROM document_chunks t
            JOIN documents d ON {CURRENT} WHERE t.key LIKE 'in/plan.%'
            ORDER BY t.key, t.position""",
    )
    by_key = {
        key: [(r["page_start"], r["heading"], r["text"]) for r in chunks if r["key"] == key]
        for key in ("in/plan.dwg", "in/plan.dxf")
    }
    assert by_key["in/plan.dwg"] == by_key["in/plan.dxf"]
    assert any("DWGNO: A-101" in text for _, _, text in by_key["in/plan.dwg"])

    hits = search.search(data_dir, "Valve")
    assert {h.key for h in hits} == {"in/plan.dwg", "in/plan.dxf"}
    out = CliRunner().invoke(app, ["search", "A-101", "--data-dir", str(data_dir), "-f", "json"])
    assert out.exit_code == 0, out.output
    assert "in/plan.dwg" in {hit["key"] for hit in json.loads(out.output)}
    out = CliRunner().invoke(
        app, ["search", "Valve", "--kind", "dwg", "--data-dir", str(data_dir), "-f", "json"]
    )
    assert out.exit_code == 0, out.output
    assert [(h["key"], h["kind"], h["page"]) for h in json.loads(out.output)] == [
        ("in/plan.dwg", "dwg", 1)
    ]

    again = s3_ingest(prefix="in/", **kw)  # the night after: nothing to read again
    assert again.extracted == {"unchanged": len(objects)}
    assert again.reextracted == {}
