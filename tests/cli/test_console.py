"""What the commands and the demo print: ``ingest.console``."""

from __future__ import annotations

from ingest import console
from ingest.report import RunSummary


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
    assert lines[0] == "run r1: 13 objects (downloaded 2, failed 11), 2.0 KB in 1.50 s"
    assert lines[1] == "text extraction: ok 2"
    assert lines[2].split() == console.STAGE_COLUMNS
    assert lines[4].split()[0] == "download-batch" and lines[5] == "(1 rows)"
    assert lines[6:] == [f"  failed: k{i}: boom" for i in range(10)]
