"""What the commands and the demo print: ``ingest.report.console``."""

from __future__ import annotations

from ingest.report import console
from ingest.report.summary import RunSummary


def test_table_aligns_columns_cuts_long_cells_and_counts_rows() -> None:
    text = console.table(["key", "n"], [("a", 1), ("long\nname", None), ("x" * 12, 22)], width=8)
    assert text.splitlines() == [
        "key       n ",
        "--------  --",
        "a         1 ",
        "long na…    ",
        "xxxxxxx…  22",
        "(3 rows)",
    ]


def test_run_summary_says_counts_extraction_stages_and_first_failures() -> None:
    summary = RunSummary(
        run_id="r1",
        counts={"failed": 11, "downloaded": 2},
        bytes=2048,
        seconds=1.5,
        extracted={"ok": 2},
        stages=[dict.fromkeys(console.STAGE_COLUMNS, 1) | {"stage": "download-batch"}],
        failures=[(f"k{i}", "boom") for i in range(11)],
    )
    lines = console.run_summary(summary).splitlines()
    assert lines[0] == (
        "run r1: 13 objects (downloaded 2, failed 11), 2.0 KB, 1.50 s in Running up to this summary"
    )
    assert lines[1] == "text extraction: ok 2"
    assert lines[2].split() == console.STAGE_COLUMNS
    assert lines[4].split()[0] == "download-batch" and lines[5] == "(1 row)"
    assert lines[6:] == [f"  failed: k{i}: boom" for i in range(10)]


def test_wide_characters_keep_the_columns_aligned() -> None:
    """Hangul takes two columns of a terminal: the next column starts where it starts for
    a row of ASCII, and a long Korean cell is cut at its width in columns."""
    text = console.table(
        ["key", "kind"], [("도면 1.txt", "txt"), ("plan.pdf", "pdf"), ("배관" * 10, "dxf")], 10
    )
    lines = text.splitlines()
    starts = {console.display_width(line[: line.rindex("  ") + 2]) for line in lines[:5]}
    assert starts == {12}, lines  # "kind" and every kind start at the same column
    assert lines[2].startswith("도면 1.txt  ")  # 10 columns: whole
    assert lines[4].startswith("배관배관… ")  # 8 columns and the ellipsis
    assert lines[-1] == "(3 rows)"
    assert console.table(["k"], [("x",)]).splitlines()[-1] == "(1 row)"
    assert console.table(["k"], []).splitlines()[-1] == "(0 rows)"
    assert console.display_width("e\u0301") == 1  # a combining accent takes no column


def test_a_summary_says_which_documents_need_ocr() -> None:
    """An image-only PDF extracts as ok with no text: the summary says so, with the keys."""
    summary = RunSummary(run_id="r1", counts={"downloaded": 3}, extracted={"ok": 3})
    assert "needs OCR" not in console.run_summary(summary)
    summary.needs_ocr, summary.needs_ocr_first = 1, [("scans/permit.pdf", 2)]
    lines = console.run_summary(summary).splitlines()
    assert lines[1:3] == [
        "text extraction: ok 3",
        "needs OCR: 1 document with pages that are images without text (2 pages), not "
        "searchable: scans/permit.pdf (INGEST_OCR_ENABLED=true reads them; "
        "documents.needs_ocr counts each one's pages)",
    ]
