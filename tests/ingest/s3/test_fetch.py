"""A batch's whole job on one worker (``ingest.s3.fetch``): download, extract, then keep,
copy to object storage or drop the files; and files made readable again for a later
extraction. Real moto server process, no Prefect."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dev.servers.s3 import DevServer
from ingest.extract import fence
from ingest.extract.batch import pool_config
from ingest.extract.pool import WorkerPool
from ingest.records import S3Object
from ingest.s3 import S3Connection, fetch
from ingest.settings import Settings


def listed(s3: Any, bucket: str, prefix: str) -> list[S3Object]:
    page = s3.list_objects_v2(Bucket=bucket, Prefix=prefix)
    return [
        S3Object(bucket, o["Key"], o["ETag"].strip('"'), o["Size"], datetime.now(UTC))
        for o in page["Contents"]
    ]


def seeded(s3: Any, n: int = 5) -> tuple[str, dict[str, bytes]]:
    bucket = f"src-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=bucket)
    bodies = {f"in/n{i}.txt": f"note {i} of the batch".encode() for i in range(n)}
    for key, body in bodies.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    return bucket, bodies


def settings_for(server: DevServer, tmp_path: Path, **kw: Any) -> Settings:
    return Settings(data_dir=tmp_path / "lake", s3={"endpoint_url": server.url}, **kw)


def test_files_copied_to_object_storage_then_gone_from_the_worker(
    s3: Any, s3_server: DevServer, tmp_path: Path
) -> None:
    bucket, bodies = seeded(s3)
    dest = f"dl-{uuid.uuid4().hex[:10]}"
    s3.create_bucket(Bucket=dest)
    settings = settings_for(s3_server, tmp_path)
    settings = settings.updated(s3={"download_dir": f"s3://{dest}/copies/"})
    client = S3Connection.open(settings.s3)

    with WorkerPool(pool_config(settings.extracting)) as pool:
        results, docs = fetch.fetch_batch(
            client,
            settings.extracting,
            listed(s3, bucket, "in/"),
            prefix="in/",
            run_id="r1",
            extract=True,
            pool=pool,
        )
    assert {r.key: r.local_path for r in results} == {
        k: f"s3://{dest}/copies/{k.removeprefix('in/')}" for k in bodies
    }
    for key, body in bodies.items():
        got = s3.get_object(Bucket=dest, Key=f"copies/{key.removeprefix('in/')}")["Body"].read()
        assert got == body
    assert {d.key: d.text.strip() for d in docs} == {k: v.decode() for k, v in bodies.items()}
    assert not (tmp_path / "lake").exists()  # nothing was written beside the lake

    # A later extraction on another machine reads the copies, not the source.
    s3_server.reset_stats()
    where = {r.key: r.local_path for r in results}
    objects = listed(s3, bucket, "in/")
    readable = fetch.materialize(
        client,
        settings.extracting,
        objects,
        [where[o.key] for o in objects],
        prefix="in/",
        folder=tmp_path / "again",
    )
    assert {k: Path(p).read_bytes() for k, _e, p in readable} == bodies
    gets = s3_server.stats()
    assert gets.get("GET object", 0) == len(bodies)  # one GET per copy, none of the source


def test_dropped_files_leave_rows_without_a_path_and_come_back_from_the_source(
    s3: Any, s3_server: DevServer, tmp_path: Path
) -> None:
    bucket, bodies = seeded(s3, n=3)
    settings = settings_for(s3_server, tmp_path, keep_files=False)
    client = S3Connection.open(settings.s3)
    objects = listed(s3, bucket, "in/")

    results, docs = fetch.fetch_batch(
        client, settings.extracting, objects, prefix="in/", run_id="r1", extract=False
    )
    assert [(r.status, r.local_path) for r in results] == [("downloaded", None)] * 3
    assert docs == []
    assert not (tmp_path / "lake").exists()

    elsewhere = tmp_path / "elsewhere.txt"  # a path of another machine: not here
    kept = tmp_path / "kept.txt"
    kept.write_bytes(bodies[objects[1].key])
    readable = fetch.materialize(
        client,
        settings.extracting,
        objects,
        [None, str(kept), str(elsewhere)],
        prefix="in/",
        folder=tmp_path / "again",
    )
    paths = {k: p for k, _e, p in readable}
    if fence.landlock_abi() >= 1:  # outside the folders the parsers may read: a copy, there
        assert Path(paths[objects[1].key]).parent == tmp_path / "again" / "copies"
        assert kept.read_bytes() == bodies[objects[1].key]  # the file itself left as it was
    else:
        assert paths[objects[1].key] == str(kept)  # this machine's file is used as it is
    assert {k: Path(p).read_bytes() for k, p in paths.items()} == bodies
