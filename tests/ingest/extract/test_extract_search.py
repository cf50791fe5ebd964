"""``ingest search``: ranked, Korean, incremental, offline (SQLite FTS5 from the stdlib)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from typer.testing import CliRunner

from cli.main import app
from ingest import search
from ingest.records import Document
from tests.helpers import write_rows

NOW = datetime(2026, 11, 30, tzinfo=UTC)


def write_docs(
    data_dir: Path, run_id: str, docs: list[tuple[str, str, str]], when: datetime
) -> None:
    rows = [
        Document(
            bucket="b",
            key=key,
            etag="e",
            kind=kind,
            status="ok",
            text=text,
            chars=len(text),
            extracted_at=when,
            run_id=run_id,
        ).as_row()
        for key, kind, text in docs
    ]
    write_rows(data_dir, "documents", run_id, "batch-000000", rows)


def test_ranked_korean_and_kind_filter(data_dir: Path) -> None:
    write_docs(
        data_dir,
        "run1",
        [
            ("plan.dxf", "dxf", "지하주차장 평면도\n도면 번호 A-101 배관 계통도"),
            ("report.pdf", "pdf", "도면을 검토한 결과 배관 도면 배관 도면 수정이 필요함"),
            ("notes.txt", "txt", "Café site notes: valve V-101 checked"),
            ("other.txt", "txt", "nothing relevant here"),
        ],
        NOW,
    )
    hits = search.search(data_dir, "도면")
    assert {h.key for h in hits} == {"plan.dxf", "report.pdf"}  # 도면을 matches too
    assert hits[0].key == "report.pdf"  # more occurrences rank first
    assert hits[0].score >= hits[1].score
    assert "도면" in hits[0].snippet
    assert [h.key for h in search.search(data_dir, "평면도")] == ["plan.dxf"]
    assert [h.key for h in search.search(data_dir, "도면", kind="dxf")] == ["plan.dxf"]
    assert [h.key for h in search.search(data_dir, "v-101")] == ["notes.txt"]
    assert [h.key for h in search.search(data_dir, "cafe")] == ["notes.txt"]  # diacritics
    assert search.search(data_dir, "배관 평면도") and not search.search(data_dir, "배관 valve")
    assert len(search.search(data_dir, "도면", limit=1)) == 1


def test_index_follows_new_runs(data_dir: Path) -> None:
    write_docs(data_dir, "run1", [("a.txt", "txt", "old words alpha")], NOW)
    assert [h.key for h in search.search(data_dir, "alpha")] == ["a.txt"]
    write_docs(data_dir, "run2", [("a.txt", "txt", "new words beta")], NOW + timedelta(hours=1))
    assert search.search(data_dir, "alpha") == []
    assert [h.key for h in search.search(data_dir, "beta")] == ["a.txt"]
    assert search.refresh_index(data_dir) == 0  # nothing new: no work


def test_cli_search(data_dir: Path) -> None:
    write_docs(data_dir, "run1", [("plan.dxf", "dxf", "지하주차장 평면도")], NOW)
    result = CliRunner().invoke(app, ["search", "평면도", "--data-dir", str(data_dir)])
    assert result.exit_code == 0, result.output
    assert "plan.dxf" in result.output and "(1 row)" in result.output
    result = CliRunner().invoke(
        app, ["search", "평면도", "--kind", "pdf", "--data-dir", str(data_dir)]
    )
    assert "(0 rows)" in result.output
