"""The s3-ingest flow extracts what it downloads: a real Prefect run against the moto
server, rows in the ``documents`` view, re-extraction only of changed objects."""

from __future__ import annotations

from pathlib import Path

import pytest

from dev import samples
from flows.s3_ingest import s3_ingest
from ingest import search
from tests.extract_support import KOREAN, cid_pdf, drawing, word_document
from tests.helpers import put_many, rows, write_rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def test_flow_writes_documents_and_skips_unchanged(s3, s3_server, bucket, data_dir: Path) -> None:
    objects = {f"in/{k}": v for k, v in samples.documents().items() if ".." not in k}
    objects |= {
        "in/korean/report.pdf": cid_pdf([KOREAN]),
        "in/korean/plan.dxf": drawing("cp949"),
        "in/korean/spec.docx": word_document(),
    }
    put_many(s3, bucket, objects)
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}

    first = s3_ingest(prefix="in/", **kw)
    assert first.counts == {"downloaded": len(objects)}
    docs = {r["key"]: r for r in rows(data_dir, "SELECT * FROM documents")}
    assert set(docs) == set(objects)  # exactly one row per stored object
    assert docs["in/reports/inspection-2026-q3.pdf"]["status"] == "ok"
    assert "north wing" in docs["in/reports/inspection-2026-q3.pdf"]["text"]
    assert docs["in/reports/broken/empty.pdf"]["status"] == "empty"
    assert docs["in/reports/broken/truncated.pdf"]["status"] == "failed"
    assert "A-101 FLOOR PLAN" in docs["in/drawings/A-101-floor-plan.dxf"]["text"]
    assert "Grade C30/37" in docs["in/specs/concrete-spec.docx"]["text"]
    assert "Site closed on Friday." in docs["in/web/notice.html"]["text"]
    assert "color:red" not in docs["in/web/notice.html"]["text"]
    assert KOREAN in docs["in/korean/report.pdf"]["text"]
    assert "회의실 301" in docs["in/korean/plan.dxf"]["text"]
    assert "중첩 표 NESTED-CELL" in docs["in/korean/spec.docx"]["text"]
    assert "지하 1층 평면도" in docs["in/notes/korean-cp949.txt"]["text"]
    assert "지하 1층 평면도" in docs["in/notes/korean-utf16.txt"]["text"]
    assert {r["etag"] for r in docs.values()} == {
        r["etag"] for r in rows(data_dir, "SELECT etag FROM s3_objects")
    }
    statuses: dict[str, int] = {}
    for r in docs.values():
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    assert first.extracted == statuses
    timing = rows(data_dir, "SELECT task_name FROM task_timings WHERE task_name = 'extract-batch'")
    assert timing

    # Unchanged objects are not extracted again; a changed one is.
    s3.put_object(Bucket=bucket, Key="in/notes/readme-utf8.txt", Body="바뀐 내용 changed".encode())
    second = s3_ingest(prefix="in/", **kw)
    assert second.extracted == {"ok": 1, "unchanged": len(objects) - 1}
    assert rows(data_dir, "SELECT count(*) n FROM documents")[0]["n"] == len(objects)
    assert (
        "바뀐 내용"
        in rows(data_dir, "SELECT text FROM documents WHERE key = 'in/notes/readme-utf8.txt'")[0][
            "text"
        ]
    )

    hits = search.search(data_dir, "회의실")
    assert [h.key for h in hits] == ["in/korean/plan.dxf"]

    third = s3_ingest(prefix="in/", extract=False, **kw)
    assert third.extracted == {}


def test_documents_of_deleted_objects_are_marked_and_leave_search(
    s3, s3_server, bucket, data_dir: Path
) -> None:
    """An object deleted from the bucket: the next run marks its document ``deleted`` (no
    text) and search stops returning it; the other document is untouched; the log keeps
    what the document said."""
    put_many(s3, bucket, {"a.txt": "배관 도면 alpha".encode(), "b.txt": "배관 계통 beta".encode()})
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    s3_ingest(**kw)
    assert sorted(h.key for h in search.search(data_dir, "배관")) == ["a.txt", "b.txt"]

    s3.delete_object(Bucket=bucket, Key="a.txt")
    second = s3_ingest(**kw)
    assert second.counts == {"deleted": 1, "skipped": 1}
    docs = {r["key"]: r for r in rows(data_dir, "SELECT key, status, text, kind FROM documents")}
    assert docs["a.txt"]["status"] == "deleted" and docs["a.txt"]["text"] is None, (
        docs,
        rows(data_dir, "SELECT key, status, run_id, extracted_at FROM document_log"),
    )
    assert docs["a.txt"]["kind"] == "txt"
    assert docs["b.txt"]["status"] == "ok" and "beta" in docs["b.txt"]["text"]
    assert [h.key for h in search.search(data_dir, "배관")] == ["b.txt"]
    assert search.search(data_dir, "alpha") == []
    logged = rows(data_dir, "SELECT status FROM document_log WHERE key = 'a.txt' ORDER BY 1")
    assert [r["status"] for r in logged] == ["deleted", "ok"]

    third = s3_ingest(**kw)  # nothing more to mark
    assert third.counts == {"skipped": 1}
    assert rows(data_dir, "SELECT count(*) n FROM document_log WHERE key = 'a.txt'")[0]["n"] == 2


def test_an_interrupted_extraction_is_done_again_by_the_next_run(
    s3, s3_server, bucket, data_dir: Path
) -> None:
    """A row whose extraction was interrupted (its worker killed from outside twice) is
    a ``failed`` row at a version that is never current: the next run extracts it."""
    from datetime import UTC, datetime

    from ingest.extract.batch import to_document
    from ingest.extract.pool import Outcome

    put_many(s3, bucket, {f"n/{i}.txt": f"note {i} 평면도".encode() for i in range(3)})
    kw = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    s3_ingest(**kw)
    [stored] = rows(data_dir, "SELECT etag, local_path FROM s3_objects WHERE key = 'n/1.txt'")
    killed = Outcome("interrupted", error="worker process killed by SIGKILL, twice")
    doc = to_document(
        bucket,
        "n/1.txt",
        stored["etag"],
        stored["local_path"],
        killed,
        run_id="killed",
        now=datetime.now(UTC),
    )
    write_rows(data_dir, "documents", "killed", "interrupted", [doc.as_row()])
    [row] = rows(data_dir, "SELECT status, error FROM documents WHERE key = 'n/1.txt'")
    assert row["status"] == "failed" and "the next run tries again" in row["error"]

    again = s3_ingest(**kw)
    assert again.extracted == {"ok": 1, "unchanged": 2}
    [row] = rows(data_dir, "SELECT status, text FROM documents WHERE key = 'n/1.txt'")
    assert row["status"] == "ok" and "note 1 평면도" in row["text"]
