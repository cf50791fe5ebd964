"""S3 Inventory reports as the listing source, against the real moto server process.

The reports are written by ``dev.inventory.write_inventory`` in AWS's layout
and formats; what is read back is compared with a LIST of the same bucket.
"""

from __future__ import annotations

import gzip
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest

from dev.inventory import InventoryRow, write_inventory
from dev.servers.s3 import DevServer
from ingest.errors import BucketNotFoundError, TerminalError
from ingest.s3 import list_objects
from ingest.s3.inventory import (
    SCHEMA,
    InventoryError,
    InventoryIntegrityError,
    InventoryNotFoundError,
    find_manifest,
    iter_inventory,
    parse_inventory_url,
    read_manifest,
)
from tests.helpers import put_many

try:
    import pyarrow.orc

    HAVE_ORC = True
except ImportError:  # pyarrow built without ORC
    HAVE_ORC = False

FORMATS = [
    "CSV",
    "Parquet",
    pytest.param("ORC", marks=pytest.mark.skipif(not HAVE_ORC, reason="no pyarrow.orc")),
]
WHEN = datetime(2024, 5, 7, 1, 0, tzinfo=UTC)
T0 = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)


@pytest.fixture
def dest(s3: Any) -> str:
    """The inventory's destination bucket."""
    name = f"inv-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


def read(s3: Any, url: str, work_dir: Path, **kw: Any) -> list[dict[str, Any]]:
    """Every row ``url``'s report yields, checking each batch's schema on the way."""
    bucket, _ = parse_inventory_url(url)
    manifest = read_manifest(s3, bucket, find_manifest(s3, url))
    batches = list(iter_inventory(s3, manifest, work_dir=work_dir, **kw))
    assert all(b.schema == SCHEMA for b in batches)
    return pa.Table.from_batches(batches, schema=SCHEMA).to_pylist()


def listed(s3: Any, bucket: str, prefix: str = "") -> list[dict[str, Any]]:
    return [
        {
            "bucket": o.bucket,
            "key": o.key,
            "etag": o.etag,
            "size": o.size,
            "last_modified": o.last_modified,
        }
        for o in list_objects(s3, bucket, prefix)
    ]


def live(key: str, size: int = 10, etag: str = "0" * 32, **kw: Any) -> InventoryRow:
    return InventoryRow(key=key, size=size, last_modified=T0, etag=etag, **kw)


def keys_of(rows: list[dict[str, Any]]) -> list[str]:
    return [r["key"] for r in rows]


# Keys the moto server stores faithfully (it decodes "%XX" in paths twice, so keys with
# a percent-encoded-looking sequence are tested through given rows instead).
HOSTILE = [
    "with space.txt",
    "two  spaces",
    "plus+sign.txt",
    "plus+and space",
    "100%.txt",
    "50%off",
    "trailing%",
    "ünïcødé/ファイル.txt",
    "emoji 🎉.bin",
    "\ufb01le",
    'quote"comma,semi;.txt',
    "amp&eq=q?hash#",
    "tilde~star*paren(1)",
    "back\\slash",
    "deep/a/b/c/d.txt",
]


def test_parse_inventory_url() -> None:
    assert parse_inventory_url("s3://dest/inv/src/cfg/") == ("dest", "inv/src/cfg/")
    assert parse_inventory_url("s3://dest/inv/src/cfg/2024-05-07T01-00Z/manifest.json") == (
        "dest",
        "inv/src/cfg/2024-05-07T01-00Z/manifest.json",
    )
    assert parse_inventory_url("s3://dest") == ("dest", "")
    for bad in ("dest/inv/", "https://dest.s3.amazonaws.com/inv/", "s3:///inv/", "s3://d/p?x=1"):
        with pytest.raises(InventoryError, match="not an s3://bucket/prefix URL") as info:
            parse_inventory_url(bad)
        assert isinstance(info.value, TerminalError)


@pytest.mark.parametrize("fmt", FORMATS)
def test_report_rows_equal_a_list_of_the_bucket(
    s3: Any, bucket: str, dest: str, tmp_path: Path, fmt: str
) -> None:
    put_many(s3, bucket, {k: k.encode() * 3 for k in HOSTILE})
    put_many(s3, bucket, {f"docs/{i:03d}.txt": b"x" * i for i in range(60)})
    upload = s3.create_multipart_upload(Bucket=bucket, Key="multipart.bin")
    part = s3.upload_part(
        Bucket=bucket,
        Key="multipart.bin",
        UploadId=upload["UploadId"],
        PartNumber=1,
        Body=b"m" * 99,
    )
    s3.complete_multipart_upload(
        Bucket=bucket,
        Key="multipart.bin",
        UploadId=upload["UploadId"],
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]},
    )

    manifest_key = write_inventory(
        s3, bucket, dest, "inventory", "daily", fmt=fmt, files=3, when=WHEN
    )
    assert manifest_key == f"inventory/{bucket}/daily/2024-05-07T01-00Z/manifest.json"
    manifest = read_manifest(s3, dest, manifest_key)
    assert (manifest.source_bucket, manifest.file_format) == (bucket, fmt)
    assert manifest.creation_timestamp == WHEN
    assert len(manifest.files) == 3
    assert all(f.key.startswith(f"inventory/{bucket}/daily/data/") for f in manifest.files)

    rows = read(s3, f"s3://{dest}/inventory/{bucket}/daily/", tmp_path / "work", batch_rows=7)
    expected = listed(s3, bucket)
    assert len(expected) == len(HOSTILE) + 61
    assert rows == expected
    assert any(r["etag"].endswith("-1") for r in rows)  # the multipart ETag, unquoted


@pytest.mark.parametrize("fmt", FORMATS)
def test_encoded_looking_keys_are_decoded_exactly_once(
    s3: Any, dest: str, tmp_path: Path, fmt: str
) -> None:
    keys = [
        "a b",
        "a+b",
        "a%2Bb",  # a literal "%2B": "a%252Bb" in the CSV
        "a%20b",
        "%41",
        "%%",
        "%",
        "%2",
        "ç/é è",
        "new\nline",
        "tab\tx",
        "🎉+🎉 🎉",
    ]
    write_inventory(s3, "src", dest, "", "cfg", fmt=fmt, objects=[live(k) for k in keys])
    rows = read(s3, f"s3://{dest}/src/cfg", tmp_path / "work")
    assert keys_of(rows) == sorted(keys, key=str.encode)
    assert {r["bucket"] for r in rows} == {"src"}


def test_csv_data_files_are_in_aws_format(s3: Any, dest: str) -> None:
    """No header, every field quoted, keys form-encoded: a space as "+", "+" as "%2B"."""
    rows = [live("a b+c/d%e"), live("gone", size=None, etag=None, is_delete_marker=True)]
    key = write_inventory(s3, "src", dest, "p", "cfg", objects=rows, files=1, when=WHEN)
    manifest = json.loads(s3.get_object(Bucket=dest, Key=key)["Body"].read())
    assert manifest["fileFormat"] == "CSV"
    assert manifest["fileSchema"] == (
        "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag, "
        "StorageClass, IsMultipartUploaded"
    )
    assert manifest["creationTimestamp"] == str(int(WHEN.timestamp() * 1000))
    [data] = manifest["files"]
    body = s3.get_object(Bucket=dest, Key=data["key"])["Body"].read()
    lines = sorted(gzip.decompress(body).decode().splitlines())
    assert lines == [
        '"src","a+b%2Bc/d%25e","","true","false","10","2024-01-02T03:04:05.678Z",'
        f'"{"0" * 32}","STANDARD","false"',
        '"src","gone","","true","true","","2024-01-02T03:04:05.678Z","","",""',
    ]
    hive = s3.get_object(Bucket=dest, Key="p/src/cfg/hive/dt=2024-05-07-01-00/symlink.txt")
    assert hive["Body"].read().decode() == f"s3://{dest}/{data['key']}\n"


def test_newest_complete_report_is_chosen(s3: Any, dest: str, tmp_path: Path) -> None:
    root = f"s3://{dest}/inv/src/cfg"
    for day in (1, 3, 2):  # written out of order
        when = WHEN + timedelta(days=day)
        write_inventory(s3, "src", dest, "inv", "cfg", objects=[live(f"day-{day}")], when=when)
    # A report still being written: its folder has no manifest.json yet.
    s3.put_object(Bucket=dest, Key="inv/src/cfg/2030-01-01T00-00Z/manifest.checksum", Body=b"0")
    # Another configuration of the same bucket is not looked at.
    write_inventory(
        s3, "src", dest, "inv", "other", objects=[live("other")], when=WHEN.replace(year=2031)
    )

    newest = "inv/src/cfg/2024-05-10T01-00Z/manifest.json"
    assert find_manifest(s3, root) == newest
    assert find_manifest(s3, root + "/") == newest
    assert find_manifest(s3, root + "/hive/") == newest
    assert keys_of(read(s3, root, tmp_path / "w1")) == ["day-3"]
    # An older report, named by its manifest, its dated folder or its Hive partition.
    older = "inv/src/cfg/2024-05-08T01-00Z/manifest.json"
    assert find_manifest(s3, f"s3://{dest}/{older}") == older
    assert find_manifest(s3, f"{root}/2024-05-08T01-00Z/") == older
    assert find_manifest(s3, f"{root}/hive/dt=2024-05-08-01-00/") == older
    assert find_manifest(s3, f"{root}/hive/dt=2024-05-08-01-00/symlink.txt") == older
    assert keys_of(read(s3, f"{root}/2024-05-08T01-00Z", tmp_path / "w2")) == ["day-1"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_all_versions_report_keeps_only_latest_live_versions(
    s3: Any, dest: str, tmp_path: Path, fmt: str
) -> None:
    rows = [
        live("kept", size=2, version_id="v2", is_latest=True),
        live("kept", size=1, version_id="v1", is_latest=False),
        live("deleted", size=None, etag=None, version_id="d2", is_delete_marker=True),
        live("deleted", size=5, version_id="d1", is_latest=False),
        live("old-marker", size=7, version_id="o2", is_latest=True),
        live(
            "old-marker",
            size=None,
            etag=None,
            version_id="o1",
            is_latest=False,
            is_delete_marker=True,
        ),
        live("plain", size=3, version_id="p1"),
    ]
    write_inventory(s3, "src", dest, "inv", "versions", fmt=fmt, objects=rows, files=3)
    manifest = read_manifest(s3, dest, find_manifest(s3, f"s3://{dest}/inv/src/versions/"))
    assert "IsLatest" in manifest.file_schema or "is_latest" in manifest.file_schema
    got = read(s3, f"s3://{dest}/inv/src/versions/", tmp_path / "work")
    assert [(r["key"], r["size"]) for r in got] == [("kept", 2), ("old-marker", 7), ("plain", 3)]


@pytest.mark.parametrize("fmt", ["CSV", "Parquet"])
def test_prefix_keeps_only_keys_under_it(s3: Any, dest: str, tmp_path: Path, fmt: str) -> None:
    keys = ["docs/a", "docs/b c", "docs/ü+", "docs", "docs2/a", "doc/a", "other/docs/a", "a b/x"]
    write_inventory(s3, "src", dest, "inv", "cfg", fmt=fmt, objects=[live(k) for k in keys])
    url = f"s3://{dest}/inv/src/cfg/"
    work = tmp_path / "work"
    assert keys_of(read(s3, url, work, prefix="docs/")) == ["docs/a", "docs/b c", "docs/ü+"]
    assert keys_of(read(s3, url, work, prefix="docs")) == [
        "docs",
        "docs/a",
        "docs/b c",
        "docs/ü+",
        "docs2/a",
    ]
    assert keys_of(read(s3, url, work, prefix="a b/")) == ["a b/x"]  # matched once decoded
    assert read(s3, url, work, prefix="nothing/") == []


def test_keys_are_sorted_in_byte_order_across_data_files(
    s3: Any, dest: str, tmp_path: Path
) -> None:
    # UTF-8 byte order, as LIST returns keys: "-" < "." < "/" < "A" < "a" < "é" < "\ufb01"
    # < "🎉" (UTF-16 order would put the emoji before U+FB01).
    alphabet = ["-", ".", "/", "0", "A", "Z", "_", "a", "z", "~", "é", "\ufb01", "🎉", " "]
    keys = sorted({f"{a}{b}{i % 3}" for a in alphabet for b in alphabet for i in range(2)})
    rows = [live(k, size=i) for i, k in enumerate(reversed(keys))]
    write_inventory(s3, "src", dest, "inv", "cfg", objects=rows, files=7)
    manifest = read_manifest(s3, dest, find_manifest(s3, f"s3://{dest}/inv/src/cfg/"))
    assert len(manifest.files) == 7
    batches = list(iter_inventory(s3, manifest, work_dir=tmp_path / "work", batch_rows=50))
    assert len(batches) > 1 and all(b.num_rows <= 50 for b in batches)
    got = [k for b in batches for k in b.column("key").to_pylist()]
    assert got == sorted(keys, key=str.encode)
    assert got != sorted(keys, key=lambda k: k.encode("utf-16-be"))


def test_data_file_differing_from_its_md5_is_a_clear_error(
    s3: Any, dest: str, tmp_path: Path
) -> None:
    key = write_inventory(s3, "src", dest, "inv", "cfg", objects=[live(f"k{i}") for i in range(9)])
    manifest = read_manifest(s3, dest, key)
    damaged = manifest.files[1]
    body = bytearray(s3.get_object(Bucket=dest, Key=damaged.key)["Body"].read())
    body[len(body) // 2] ^= 0xFF  # same size, other bytes
    s3.put_object(Bucket=dest, Key=damaged.key, Body=bytes(body))

    work = tmp_path / "work"
    with pytest.raises(
        InventoryIntegrityError, match=r"MD5 \w+ differs from the manifest's"
    ) as info:
        list(iter_inventory(s3, manifest, work_dir=work))
    assert isinstance(info.value, TerminalError)
    assert f"s3://{dest}/{damaged.key}" in str(info.value)
    assert "fetched 2 times" in str(info.value)
    assert not list((work / "files").glob(f"{damaged.md5}*"))  # nothing unchecked is kept
    assert not list((work / "files").glob(".*.part"))


def test_manifest_differing_from_its_checksum_is_a_clear_error(s3: Any, dest: str) -> None:
    key = write_inventory(s3, "src", dest, "inv", "cfg", objects=[live("k")])
    body = s3.get_object(Bucket=dest, Key=key)["Body"].read()
    s3.put_object(Bucket=dest, Key=key, Body=body.replace(b'"k', b'"K'))
    with pytest.raises(InventoryIntegrityError, match=r"differs from manifest\.checksum"):
        read_manifest(s3, dest, key)


@pytest.mark.parametrize("md5", ["../../../../tmp/evil", "0" * 31 + "/", "", "ab" * 20])
def test_an_md5checksum_that_is_not_hex_never_names_a_file(
    s3: Any, dest: str, tmp_path: Path, md5: str
) -> None:
    """The checksum names the local copy of a data file: it must be 32 hex digits, even in
    a manifest whose own checksum matches (whoever writes the report writes both)."""
    import hashlib

    key = write_inventory(s3, "src", dest, "inv", "cfg", objects=[live("k")])
    doc = json.loads(s3.get_object(Bucket=dest, Key=key)["Body"].read())
    doc["files"][0]["MD5checksum"] = md5
    body = json.dumps(doc).encode()
    s3.put_object(Bucket=dest, Key=key, Body=body)
    checksum = hashlib.md5(body, usedforsecurity=False).hexdigest().encode()
    s3.put_object(Bucket=dest, Key=key.replace("manifest.json", "manifest.checksum"), Body=checksum)
    with pytest.raises(InventoryError, match="is not 32 hex digits"):
        read_manifest(s3, dest, key)
    assert not list(tmp_path.parents[0].glob("evil*")) and not Path("/tmp/evil").exists()


def test_data_file_corrupted_in_transit_is_fetched_again(tmp_path: Path) -> None:
    faults = ["corrupt:/once/data/:1", "corrupt:/always/data/:5"]
    with DevServer(faults=faults) as server:
        s3 = boto3.client("s3", endpoint_url=server.url, region_name="us-east-1")
        s3.create_bucket(Bucket="dest")
        for config in ("once", "always"):
            write_inventory(
                s3, "src", "dest", "", config, objects=[live(f"{config}-{i}") for i in range(5)]
            )
        server.reset_stats()
        rows = read(s3, "s3://dest/src/once/", tmp_path / "once")
        assert len(rows) == 5
        assert server.stats()["fault corrupt"] == 2  # both data files, each fetched twice
        with pytest.raises(InventoryIntegrityError, match="fetched 2 times"):
            read(s3, "s3://dest/src/always/", tmp_path / "always")


def test_data_files_already_checked_are_not_fetched_again(
    s3: Any, s3_server: DevServer, dest: str, tmp_path: Path
) -> None:
    write_inventory(
        s3, "src", dest, "inv", "cfg", objects=[live(f"k{i}") for i in range(6)], files=3
    )
    url = f"s3://{dest}/inv/src/cfg/"
    first = read(s3, url, tmp_path / "work")
    s3_server.reset_stats()
    assert read(s3, url, tmp_path / "work") == first
    stats = s3_server.stats()
    assert stats.get("GET object", 0) == 2  # manifest.json and manifest.checksum only
    assert not list((tmp_path / "work").glob("stage-*"))  # the sorted stage is removed


def test_missing_report_is_a_clear_terminal_error(
    s3: Any, dest: str, bucket: str, tmp_path: Path
) -> None:
    with pytest.raises(InventoryNotFoundError, match="no S3 Inventory report under") as info:
        find_manifest(s3, f"s3://{dest}/inv/src/cfg/")
    assert isinstance(info.value, TerminalError)
    assert f"s3://{dest}/inv/src/cfg/" in str(info.value)
    with pytest.raises(InventoryNotFoundError, match="does not exist"):
        find_manifest(s3, f"s3://{dest}/inv/src/cfg/2024-05-07T01-00Z/manifest.json")
    with pytest.raises(InventoryNotFoundError, match="does not exist"):
        find_manifest(s3, f"s3://{dest}/inv/src/cfg/hive/dt=2024-05-07-01-00/")
    with pytest.raises(InventoryNotFoundError, match="does not exist"):
        read_manifest(s3, dest, "inv/src/cfg/2024-05-07T01-00Z/manifest.json")
    with pytest.raises(BucketNotFoundError):
        find_manifest(s3, f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/inv/src/cfg/")

    # A data file the manifest lists is gone.
    key = write_inventory(s3, bucket, dest, "inv", "cfg", objects=[live("k")])
    manifest = read_manifest(s3, dest, key)
    s3.delete_object(Bucket=dest, Key=manifest.files[0].key)
    with pytest.raises(InventoryNotFoundError, match="data file listed in the manifest"):
        list(iter_inventory(s3, manifest, work_dir=tmp_path / "work"))


def test_report_without_the_fields_a_listing_needs_is_refused(s3: Any, dest: str) -> None:
    manifest = {
        "sourceBucket": "src",
        "destinationBucket": f"arn:aws:s3:::{dest}",
        "version": "2016-11-30",
        "creationTimestamp": "1514944800000",
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, Size, StorageClass",
        "files": [],
    }
    s3.put_object(Bucket=dest, Key="x/manifest.json", Body=json.dumps(manifest).encode())
    with pytest.raises(InventoryError, match=r"lacks the field\(s\) LastModifiedDate, ETag"):
        read_manifest(s3, dest, "x/manifest.json")
    s3.put_object(Bucket=dest, Key="y/manifest.json", Body=b"<html>not json</html>")
    with pytest.raises(InventoryError, match="is not an S3 Inventory manifest"):
        read_manifest(s3, dest, "y/manifest.json")


def test_empty_bucket_gives_no_rows(s3: Any, bucket: str, dest: str, tmp_path: Path) -> None:
    for fmt in ("CSV", "Parquet"):
        write_inventory(s3, bucket, dest, fmt, "cfg", fmt=fmt)  # type: ignore[arg-type]
        assert read(s3, f"s3://{dest}/{fmt}/{bucket}/cfg/", tmp_path / fmt) == []
