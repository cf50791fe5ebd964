"""Prefixes end on a ``/`` boundary and one local path holds one object, on the real dev
S3 server: ``--prefix docs`` reads the folder ``docs/`` as ``aws s3 sync s3://b/docs``
does (``docsa.txt`` is not under it, so it cannot take ``docs/a.txt``'s file); keys that
differ only by case or Unicode normal form are refused when the setting says the target
folder cannot tell them apart, within a run and against files of earlier runs."""

from __future__ import annotations

import unicodedata
from pathlib import Path
from typing import Any

import pytest

from flows.s3_ingest import s3_ingest
from ingest.s3.keys import PathClaims
from tests.helpers import files_under, put_many, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

FINE = {f"in/ok-{i:02d}.txt": f"fine {i}".encode() for i in range(40)}  # failures under 10 %


def ingest(bucket: str, endpoint: str, data_dir: Path, **kw: Any) -> Any:
    return s3_ingest(bucket=bucket, endpoint_url=endpoint, data_dir=str(data_dir), **kw)


def test_a_prefix_without_slash_is_the_folder(s3, s3_server, bucket, data_dir) -> None:
    objects = {
        "docs/a.txt": b"under docs/",
        "docsa.txt": b"beside docs/, same name below a string prefix",
        "docs2/a.txt": b"another folder",
        "docs/sub/c.txt": b"deeper",
        "docs": b"an object named like the folder",
    }
    put_many(s3, bucket, objects)
    first = ingest(bucket, s3_server.url, data_dir, prefix="docs")
    assert first.counts == {"downloaded": 2}
    assert files_under(data_dir / "objects" / bucket) == {
        "a.txt": b"under docs/",
        "sub/c.txt": b"deeper",
    }
    stored = rows(data_dir, "SELECT key, local_path FROM s3_objects ORDER BY key")
    assert [r["key"] for r in stored] == ["docs/a.txt", "docs/sub/c.txt"]
    assert len({r["local_path"] for r in stored}) == 2
    # the next night has nothing to fetch: no object keeps overwriting another's file
    s3_server.reset_stats()
    second = ingest(bucket, s3_server.url, data_dir, prefix="docs")
    assert second.counts == {"skipped": 2}
    assert s3_server.stats().get("GET object", 0) == 0
    # "docs" and "docs/" are one listing: the same rows, nothing refetched or deleted
    third = ingest(bucket, s3_server.url, data_dir, prefix="docs/")
    assert third.counts == {"skipped": 2}


def test_keys_that_fold_together_are_refused_when_asked(
    s3, s3_server, bucket, tmp_path, monkeypatch
) -> None:
    nfc = unicodedata.normalize("NFC", "in/café.txt")
    nfd = unicodedata.normalize("NFD", "in/café.txt")
    put_many(
        s3, bucket, {"in/Report.txt": b"R", "in/report.txt": b"r", nfc: b"c", nfd: b"d"} | FINE
    )
    monkeypatch.setenv("INGEST_S3_REFUSE_FOLDED_COLLISIONS", "true")
    data_dir, folder = tmp_path / "data", tmp_path / "downloads"
    summary = ingest(bucket, s3_server.url, data_dir, prefix="in/", download_dir=str(folder))
    assert summary.counts == {"downloaded": 42, "failed": 2}
    failed = rows(data_dir, "SELECT key, error FROM s3_objects WHERE status = 'failed'")
    by_key = {r["key"]: r["error"] for r in failed}
    # keys are listed in byte order: the later of each pair is refused, naming the other
    assert set(by_key) == {"in/report.txt", nfc}
    assert "'in/Report.txt'" in by_key["in/report.txt"]
    assert "PathCollisionError" in by_key[nfc] and "case or Unicode normal form" in by_key[nfc]
    on_disk = files_under(folder)
    assert on_disk["Report.txt"] == b"R" and "report.txt" not in on_disk
    assert on_disk[nfd.removeprefix("in/")] == b"d"

    # a later run: a new key that folds onto a file an earlier run wrote is refused too
    s3.put_object(Bucket=bucket, Key="in/OK-00.TXT", Body=b"shouting")
    later = ingest(bucket, s3_server.url, data_dir, prefix="in/", download_dir=str(folder))
    assert later.counts.get("failed") == 3  # the two pairs again, and the new one
    error = rows(data_dir, "SELECT error FROM s3_objects WHERE key = 'in/OK-00.TXT'")[0]["error"]
    assert "ok-00.txt" in error
    assert files_under(folder)["ok-00.txt"] == b"fine 0"


def test_without_the_setting_a_case_sensitive_folder_keeps_both(
    s3, s3_server, bucket, tmp_path
) -> None:
    put_many(s3, bucket, {"in/Report.txt": b"R", "in/report.txt": b"r"})
    folder = tmp_path / "downloads"
    summary = ingest(
        bucket, s3_server.url, tmp_path / "data", prefix="in/", download_dir=str(folder)
    )
    assert summary.counts == {"downloaded": 2}
    assert files_under(folder) == {"Report.txt": b"R", "report.txt": b"r"}


def test_one_path_one_key_within_a_run(tmp_path: Path) -> None:
    claims = PathClaims()
    path = str(tmp_path / "a.txt")
    assert claims.claim(path, "docs/a.txt") is None
    assert claims.claim(path, "docs/a.txt") is None  # the same key again (a retried batch)
    assert claims.claim(path, "other/a.txt") == "docs/a.txt"
    assert claims.claim(str(tmp_path / "A.txt"), "docs/A.txt") is None  # not folded


def test_a_download_folder_over_the_lake_fails_the_run_before_it_writes(
    s3, s3_server, bucket, data_dir
) -> None:
    put_many(s3, bucket, {"s3_objects/_delta_log/00000000000000000000.json": b"{}"} | FINE)
    ingest(bucket, s3_server.url, data_dir, prefix="in/")  # a lake to protect
    before = files_under(data_dir / "lake")
    with pytest.raises(ValueError, match="inside the data folder"):
        ingest(bucket, s3_server.url, data_dir, download_dir=str(data_dir / "lake"))
    assert files_under(data_dir / "lake") == before
