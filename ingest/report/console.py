"""What a run looks like as text on a terminal: a table of rows, an s3-ingest summary.

The ``ingest`` command prints these, and so does anything else that shows a run or a
query to a person (the demo), without importing the command.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

from ingest.records import needs_ocr_line
from ingest.report.timing import human_bytes, seconds_so_far

if TYPE_CHECKING:
    from ingest.report.summary import RunSummary

STAGE_COLUMNS = ["stage", "task_runs", "items", "bytes", "wall_seconds", "items_per_s", "mb_per_s"]


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], width: int = 60) -> str:
    """``rows`` under ``columns``, each column as wide as its widest cell, a cell cut at
    ``width`` columns of the terminal (newlines as spaces), then the count of rows.

    Widths are what a terminal shows, not characters: Hangul, CJK and other wide
    characters take two columns (``display_width``), so the columns stay aligned."""
    cells = [[_cell(v, width) for v in r] for r in rows]
    widths = [
        max([display_width(c)] + [display_width(r[i]) for r in cells])
        for i, c in enumerate(columns)
    ]
    lines = [
        "  ".join(_pad(c, w) for c, w in zip(columns, widths, strict=True)),
        "  ".join("-" * w for w in widths),
        *("  ".join(_pad(v, w) for v, w in zip(r, widths, strict=True)) for r in cells),
        f"({len(rows)} {'row' if len(rows) == 1 else 'rows'})",
    ]
    return "\n".join(lines)


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: two for a wide or full-width character (Hangul,
    CJK), none for a combining mark, one for the others."""
    return sum(_char_width(c) for c in text)


def _char_width(c: str) -> int:
    if c.isascii():
        return 1
    if unicodedata.combining(c):
        return 0
    return 2 if unicodedata.east_asian_width(c) in ("W", "F") else 1


def _pad(text: str, width: int) -> str:
    return text + " " * (width - display_width(text))


def _cell(value: Any, width: int) -> str:
    text = "" if value is None else str(value)
    text = text.replace("\n", " ")
    if display_width(text) <= width:
        return text
    # the characters whose columns, with those before them, leave one for the "…"
    kept = sum(1 for used in accumulate(map(_char_width, text)) if used < width)
    return text[:kept] + "…"


def run_summary(summary: RunSummary) -> str:
    """An s3-ingest run: its counts and bytes, the text extraction's outcome, the table of
    its stages and its first ten failures."""
    counts = ", ".join(f"{k} {v}" for k, v in sorted(summary.counts.items()))
    lines = [
        f"run {summary.run_id}: {summary.total} objects ({counts}), "
        f"{human_bytes(summary.bytes)}, {seconds_so_far(summary.seconds)}"
    ]
    if summary.note:
        lines.append(summary.note)
    if summary.extracted:
        extracted = ", ".join(f"{k} {v}" for k, v in sorted(summary.extracted.items()))
        lines.append(f"text extraction: {extracted}")
    if summary.needs_ocr:
        lines.append(needs_ocr_line(summary.needs_ocr, summary.needs_ocr_first))
    if summary.reextracted:
        why = ", ".join(f"{k}: {v}" for k, v in sorted(summary.reextracted.items()))
        lines.append(f"extracted again: {why}")
    if summary.stages:
        stages = [tuple(s[c] for c in STAGE_COLUMNS) for s in summary.stages]
        lines.append(table(STAGE_COLUMNS, stages))
    lines += [f"  failed: {key}: {error}" for key, error in summary.failures[:10]]
    return "\n".join(lines)
