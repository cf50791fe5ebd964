"""Keys and error texts in the markdown artifacts read as the text they are: rendered as
the Prefect UI would (markdown with tables and raw HTML allowed), a hostile key keeps its
table row whole, its code span closed, and no HTML of its own."""

from __future__ import annotations

import html
import re

import pytest
from markdown_it import MarkdownIt

from ingest import markdown as md
from ingest.report import nightly
from ingest.report import summary as report
from ingest.rest.records import RestSummary
from ingest.rest.summary import markdown as rest_markdown

HOSTILE = [
    ("docs/a|b`c``d.txt", "ValueError: x | y"),
    ("docs/line\nbreak.txt", "UnsafeKeyError: control character\n| forged | row |"),
    ("docs/<img src=x onerror=alert(1)>.pdf", "<script>alert(1)</script> **bold** [l](http://x)"),
    ("`", "_under_ *star* ~~strike~~ \\ back"),
]


def render(text: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(text)


def cells(page: str) -> list[list[str]]:
    rows = re.findall(r"<tr>(.*?)</tr>", page, re.S)
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c)) for c in re.findall(r"<td>(.*?)</td>", r, re.S)]
        for r in rows
    ]


def visible(text: str) -> str:
    return text.replace("\n", "\\x0a")


def check(
    page: str, expected: list[tuple[str, str]], key_column: int, error_column: int | None = None
) -> None:
    page = page[page.index("<table>") :]
    assert "<img" not in page and "<script" not in page and "<strong>" not in page
    assert "<a " not in page and "<em>" not in page and "<s>" not in page
    body = [row for row in cells(page) if row]
    assert len(body) == len(expected)  # no row broken, none forged
    for row, (key, error) in zip(body, expected, strict=True):
        assert row[key_column] == visible(key)
        assert row[key_column + 1 if error_column is None else error_column] == visible(error)


def test_the_run_summary_keeps_hostile_keys_as_text() -> None:
    summary = report.RunSummary(run_id="r", counts={"failed": 4}, failures=HOSTILE)
    check(render(report.markdown(summary, "s3-ingest")), HOSTILE, 0, error_column=2)


def test_the_nightly_summary_keeps_hostile_keys_as_text() -> None:
    outcome = nightly.ChildOutcome(
        flow_name="s3-ingest",
        flow_run_id="r",
        state="completed",
        failures=[(k, e, False) for k, e in HOSTILE],
    )
    page = render(nightly.markdown([outcome], [], 1.0, ""))
    assert "<img" not in page and "<script" not in page
    rows = [row for row in cells(page) if row]
    assert [row[1] for row in rows] == [visible(k) for k, _ in HOSTILE]
    assert [row[2] for row in rows] == [visible(e) for _, e in HOSTILE]


def test_a_rest_note_from_the_api_is_text() -> None:
    note = "page failed: <img src=x onerror=alert(1)> | forged"
    summary = RestSummary(run_id="r", source="s")
    summary.resources.append(
        {
            "resource": "t",
            "table": "s__t",
            "listings": 1,
            "complete": False,
            "records": 0,
            "pages": 1,
            "requests": 1,
            "failed_pages": 1,
            "page_size": 10,
            "note": note,
        }
    )
    page = render(rest_markdown(summary, "rest"))
    assert "<img" not in page
    assert cells(page)[-1][-1] == note


@pytest.mark.parametrize("text", ["plain", "a`b", "``", "x|y", "`edge`"])
def test_a_code_span_shows_its_text(text: str) -> None:
    page = render(f"| k |\n|---|\n| {md.code(text)} |\n")
    assert cells(page)[-1] == [text]


def test_a_run_summary_title_is_text() -> None:
    """The title names the bucket and prefix (or the source) a run was given: a prefix of
    ``<img src=x onerror=...>`` is shown, not rendered."""
    title = "s3-ingest (s3://b/<img src=x onerror=alert(1)>)"
    for text in (
        report.markdown(report.RunSummary(run_id="r"), title),
        rest_markdown(RestSummary(run_id="r", source="s"), title),
    ):
        page = render(text)
        assert "<img" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page
