"""A folder moved in the bucket: the moved objects take their stored files and extracted
rows, with no GET (counted at the S3 server) and no parse (counted in the run's task
timings); the old keys are deleted; a copy is recognised the same way; new content is
fetched and extracted as before."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dev.servers.s3 import DevServer
from flows.s3_ingest import s3_ingest
from tests.helpers import body_for, files_under, put_many, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

MOVED = 300


def text_for(i: int) -> bytes:
    return f"drawing register {i}\n".encode() + body_for(f"t{i}", 200).hex().encode()


def stage_items(summary: Any, stage: str) -> int:
    return sum(s["items"] for s in summary.stages if s["stage"] == stage)


def test_a_moved_folder_is_taken_from_the_stored_files_and_rows(
    s3_server: DevServer, s3: Any, bucket: str, data_dir: Path
) -> None:
    objects = {f"projects/alpha/{i:04d}.txt": text_for(i) for i in range(MOVED)}
    objects |= {f"projects/keep/{i}.txt": text_for(1000 + i) for i in range(10)}
    put_many(s3, bucket, objects)
    first = s3_ingest(bucket=bucket, endpoint_url=s3_server.url, data_dir=str(data_dir))
    assert first.counts == {"downloaded": MOVED + 10}

    # Rename the folder (server-side copies keep the ETags, as S3 does), copy one file
    # elsewhere beside its original, and add one new file.
    for i in range(MOVED):
        old, new = f"projects/alpha/{i:04d}.txt", f"projects/beta/{i:04d}.txt"
        s3.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        s3.delete_object(Bucket=bucket, Key=old)
    s3.copy_object(
        Bucket=bucket,
        Key="archive/keep-0.txt",
        CopySource={"Bucket": bucket, "Key": "projects/keep/0.txt"},
    )
    s3.put_object(Bucket=bucket, Key="projects/beta/new.txt", Body=b"a new drawing register")
    s3_server.reset_stats()
    second = s3_ingest(bucket=bucket, endpoint_url=s3_server.url, data_dir=str(data_dir))

    assert second.counts == {
        "copied": MOVED + 1,
        "skipped": 10,
        "deleted": MOVED,
        "downloaded": 1,
    }
    assert s3_server.stats().get("GET object", 0) == 1  # the new file alone
    assert stage_items(second, "download-batch") == 1
    assert stage_items(second, "extract-batch") == 1  # one parse: the new file's
    root = data_dir / "objects" / bucket
    expected = {k: v for k, v in objects.items() if not k.startswith("projects/alpha/")}
    expected |= {f"projects/beta/{i:04d}.txt": text_for(i) for i in range(MOVED)}
    expected |= {"archive/keep-0.txt": objects["projects/keep/0.txt"]}
    expected["projects/beta/new.txt"] = b"a new drawing register"
    on_disk = files_under(root)
    assert {k: v for k, v in on_disk.items() if not k.startswith("projects/alpha/")} == expected

    states = rows(
        data_dir,
        "SELECT split_part(key, '/', 2) AS folder, status, count(*) AS n FROM s3_objects "
        "GROUP BY ALL ORDER BY ALL",
    )
    assert {(r["folder"], r["status"]): r["n"] for r in states} == {
        ("alpha", "deleted"): MOVED,
        ("beta", "copied"): MOVED,
        ("beta", "downloaded"): 1,
        ("keep", "downloaded"): 10,  # unchanged: their first rows stand
        ("keep-0.txt", "copied"): 1,
    }
    docs = rows(
        data_dir,
        "SELECT key, status, text FROM documents WHERE key LIKE 'projects/beta/0%' "
        "OR key LIKE 'projects/alpha/0%' ORDER BY key",
    )
    beta = {r["key"]: r for r in docs if "/beta/" in r["key"]}
    alpha = {r["key"]: r for r in docs if "/alpha/" in r["key"]}
    assert len(beta) == MOVED and all(r["status"] == "ok" for r in beta.values())
    assert beta["projects/beta/0042.txt"]["text"].startswith("drawing register 42")
    assert {r["status"] for r in alpha.values()} == {"deleted"}

    chunks = rows(
        data_dir,
        "SELECT split_part(key, '/', 2) AS folder, status, count(*) AS n, "
        "count(DISTINCT chunk_id) AS ids FROM document_chunks "
        "WHERE key LIKE 'projects/%/0%' GROUP BY ALL ORDER BY ALL",
    )
    by = {(r["folder"], r["status"]): (r["n"], r["ids"]) for r in chunks}
    assert by[("beta", "ok")][0] == by[("alpha", "deleted")][0] >= MOVED  # the same chunks
    assert by[("beta", "ok")][1] == by[("beta", "ok")][0]  # with ids of their own keys
    ids = rows(
        data_dir,
        "SELECT count(*) AS n FROM document_chunks a JOIN document_chunks b USING (chunk_id) "
        "WHERE a.key LIKE 'projects/alpha/%' AND b.key LIKE 'projects/beta/%'",
    )
    assert ids[0]["n"] == 0

    # The next night changes nothing: the copied objects are stored objects like others.
    s3_server.reset_stats()
    third = s3_ingest(bucket=bucket, endpoint_url=s3_server.url, data_dir=str(data_dir))
    assert third.counts == {"skipped": MOVED + 10 + 2}
    assert s3_server.stats().get("GET object", 0) == 0


def test_with_files_not_kept_a_moved_folder_takes_the_stored_rows(
    s3_server: DevServer, s3: Any, bucket: str, data_dir: Path
) -> None:
    """``keep_files`` false: no file to take, the rows are all there is; the moved keys
    get theirs (a ``copied`` row with no path, as a fetched object of such a run has, and
    their documents) with no GET and no parse, and no file appears."""
    moved = 120
    objects = {f"in/old/{i:04d}.txt": text_for(i) for i in range(moved)}
    put_many(s3, bucket, objects)
    run = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    first = s3_ingest(**run, keep_files=False)
    assert first.counts == {"downloaded": moved}
    for i in range(moved):
        old, new = f"in/old/{i:04d}.txt", f"in/new/{i:04d}.txt"
        s3.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        s3.delete_object(Bucket=bucket, Key=old)
    s3.put_object(Bucket=bucket, Key="in/new/fresh.txt", Body=b"a fresh drawing register")
    s3_server.reset_stats()
    second = s3_ingest(**run, keep_files=False)

    assert second.counts == {"copied": moved, "deleted": moved, "downloaded": 1}
    assert s3_server.stats().get("GET object", 0) == 1  # the fresh file alone
    assert stage_items(second, "fetch-batch") == 1  # one download and one parse
    assert files_under(data_dir / "objects") == {}
    copied = rows(
        data_dir,
        "SELECT key, local_path FROM s3_objects WHERE status = 'copied' ORDER BY key",
    )
    assert [r["key"] for r in copied] == [f"in/new/{i:04d}.txt" for i in range(moved)]
    assert all(r["local_path"] is None for r in copied)
    docs = rows(data_dir, "SELECT key, text FROM documents WHERE key LIKE 'in/new/0%'")
    assert len(docs) == moved
    assert all(r["text"].startswith(f"drawing register {int(r['key'][7:11])}\n") for r in docs)

    s3_server.reset_stats()
    third = s3_ingest(**run, keep_files=False)
    assert third.counts == {"skipped": moved + 1}
    assert s3_server.stats().get("GET object", 0) == 0


def test_a_moved_object_whose_stored_text_is_of_an_older_extractor_is_extracted_again(
    s3_server: DevServer, s3: Any, bucket: str, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The content key and the extractor version decide, not the key: once the text
    extractor's code version is bumped, a moved text file's stored row is no current
    extraction, so it is fetched and extracted under its new key rather than copied."""
    from ingest.extract import provenance

    n = 12
    put_many(s3, bucket, {f"a/{i:02d}.txt": text_for(i) for i in range(n)})
    run = {"bucket": bucket, "endpoint_url": s3_server.url, "data_dir": str(data_dir)}
    assert s3_ingest(**run).counts == {"downloaded": n}
    monkeypatch.setitem(provenance.CODE, "text", provenance.CODE["text"] + 1)
    for i in range(n):
        old, new = f"a/{i:02d}.txt", f"b/{i:02d}.txt"
        s3.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        s3.delete_object(Bucket=bucket, Key=old)
    s3_server.reset_stats()
    second = s3_ingest(**run)

    assert second.counts == {"downloaded": n, "deleted": n}
    assert s3_server.stats().get("GET object", 0) == n
    assert stage_items(second, "extract-batch") == n
    docs = rows(
        data_dir, "SELECT key, status, extractor_version FROM documents WHERE key LIKE 'b/%'"
    )
    assert len(docs) == n and {r["status"] for r in docs} == {"ok"}
    assert all(f"text/{provenance.CODE['text']}" in r["extractor_version"] for r in docs)


def test_with_downloads_kept_on_object_storage_a_moved_folder_is_copied_there_by_the_store(
    s3_server: DevServer, s3: Any, bucket: str, data_dir: Path
) -> None:
    """``download_dir`` an ``s3://`` address: a moved key's stored copy there is copied by
    the store to the key's own address (no GET of the source, no parse), and its rows
    name that address."""
    moved = 40
    dest = f"{bucket}-copies"
    s3.create_bucket(Bucket=dest)
    objects = {f"in/old/{i:03d}.txt": text_for(i) for i in range(moved)}
    put_many(s3, bucket, objects)
    run = {
        "bucket": bucket,
        "endpoint_url": s3_server.url,
        "data_dir": str(data_dir),
        "download_dir": f"s3://{dest}/copies/",
    }
    assert s3_ingest(**run).counts == {"downloaded": moved}
    for i in range(moved):
        old, new = f"in/old/{i:03d}.txt", f"in/new/{i:03d}.txt"
        s3.copy_object(Bucket=bucket, Key=new, CopySource={"Bucket": bucket, "Key": old})
        s3.delete_object(Bucket=bucket, Key=old)
    s3_server.reset_stats()
    second = s3_ingest(**run)

    assert second.counts == {"copied": moved, "deleted": moved}
    assert s3_server.stats().get("GET object", 0) == 0
    assert stage_items(second, "fetch-batch") == 0
    copied = rows(data_dir, "SELECT key, local_path FROM s3_objects WHERE status = 'copied'")
    assert {r["key"]: r["local_path"] for r in copied} == {
        f"in/new/{i:03d}.txt": f"s3://{dest}/copies/in/new/{i:03d}.txt" for i in range(moved)
    }
    for i in (0, moved - 1):
        got = s3.get_object(Bucket=dest, Key=f"copies/in/new/{i:03d}.txt")["Body"].read()
        assert got == text_for(i)
    docs = rows(data_dir, "SELECT key, text FROM documents WHERE key LIKE 'in/new/%'")
    assert len(docs) == moved
    assert all(r["text"].startswith(f"drawing register {int(r['key'][7:10])}\n") for r in docs)
