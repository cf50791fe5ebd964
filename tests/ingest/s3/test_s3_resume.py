"""A big object's download resumed from what is on disk: a failed run's ranges are
requested again only where bytes are missing (the Range headers the fault proxy saw),
pinned with If-Match; an object changed since starts over."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from dev.servers.faultproxy import FaultProxy
from dev.servers.s3 import DevServer
from ingest.errors import DownloadError
from ingest.s3 import BatchDownloader, Fetched, S3Connection
from ingest.s3.keys import TMP_DIR_NAME
from ingest.s3.resume import Journal
from ingest.settings import Settings
from tests.helpers import body_for
from tests.ingest.s3.test_s3_verify import listed

MiB = 1024 * 1024


@pytest.fixture
def proxy(s3_server: DevServer) -> Iterator[FaultProxy]:
    with FaultProxy(s3_server.url) as p:
        yield p


def settings_for(url: str, tmp_path: Path) -> Settings:
    return Settings(
        data_dir=tmp_path,
        s3={
            "endpoint_url": url,
            "range_threshold": MiB,
            "range_size": MiB,
            "stream_retries": 0,
            "max_attempts": 1,
        },
    )


def run(settings: Settings, obj: Any, root: Path) -> Any:
    with S3Connection.open(settings.s3) as conn:
        [(_, _, outcome)] = BatchDownloader(conn, root).run([(obj, str(root / obj.key))])
    return outcome


def asked(proxy: FaultProxy, key: str) -> list[tuple[int, int]]:
    """The byte ranges GET requests asked for ``key``, as ``(start, end)``."""
    out = []
    for path, header in proxy.stats()["gets"]:
        if path.endswith(f"/{key}"):
            first, _, last = header.removeprefix("bytes=").partition("-")
            out.append((int(first), int(last) + 1))
    return sorted(out)


def test_a_failed_run_s_big_object_resumes_with_only_the_missing_ranges(
    s3: Any, bucket: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    body = body_for("big", 4 * MiB + 100)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=body)
    obj = listed(s3, bucket, "big.bin")
    settings = settings_for(proxy.url, tmp_path)
    root = tmp_path / "out"

    # Every answer declares half its body: each range is half written, then fails.
    proxy.plan([{"kind": "short", "match": "big.bin", "on": "get"}])
    failed = run(settings, obj, root)
    assert isinstance(failed, DownloadError), failed
    assert not (root / "big.bin").exists()
    first = asked(proxy, "big.bin")
    assert [e - s for s, e in first] == [MiB] * 4 + [100]
    journal = Journal.open(root, obj)
    assert journal is not None
    on_disk = journal.done
    journal.close()
    halves = [(s, s + (e - s) // 2) for s, e in first]
    assert on_disk == halves

    proxy.plan([])  # counters reset
    got = run(settings, obj, root)
    assert isinstance(got, Fetched), got
    assert (root / "big.bin").read_bytes() == body
    # Only what was missing: the second half of each range, nothing twice.
    assert asked(proxy, "big.bin") == [(h, e) for (_, h), (_, e) in zip(halves, first, strict=True)]
    assert sum(e - s for s, e in asked(proxy, "big.bin")) == len(body) - sum(
        e - s for s, e in halves
    )
    assert list((root / TMP_DIR_NAME).iterdir()) == []  # journal and file gone once published


def test_a_changed_object_starts_over(
    s3: Any, bucket: str, proxy: FaultProxy, tmp_path: Path
) -> None:
    body = body_for("old", 2 * MiB)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=body)
    settings = settings_for(proxy.url, tmp_path)
    root = tmp_path / "out"
    proxy.plan([{"kind": "short", "match": "big.bin", "on": "get"}])
    assert isinstance(run(settings, listed(s3, bucket, "big.bin"), root), DownloadError)

    new = body_for("new", 2 * MiB)
    s3.put_object(Bucket=bucket, Key="big.bin", Body=new)
    proxy.plan([])
    got = run(settings, listed(s3, bucket, "big.bin"), root)
    assert isinstance(got, Fetched), got
    assert (root / "big.bin").read_bytes() == new
    assert asked(proxy, "big.bin") == [(0, MiB), (MiB, 2 * MiB)]  # from byte 0


def test_leftovers_no_run_asked_for_again_are_swept_after_a_week(tmp_path: Path) -> None:
    from ingest.s3 import sweep_temp
    from ingest.s3.resume import KEEP_FOR

    tmp = tmp_path / TMP_DIR_NAME
    tmp.mkdir()
    for name in ("old", "new"):
        (tmp / f"resume-{name}.part").write_bytes(b"x")
        (tmp / f"resume-{name}.part.done").write_text("etag 1\n")
    week_ago = (tmp / "resume-new.part.done").stat().st_mtime - KEEP_FOR - 60
    os.utime(tmp / "resume-old.part.done", (week_ago, week_ago))
    assert sweep_temp(tmp_path) == 1
    assert sorted(p.name for p in tmp.iterdir()) == ["resume-new.part", "resume-new.part.done"]
