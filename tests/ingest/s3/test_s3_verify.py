"""Every download checked against the object's content: bodies corrupted in flight
(moto behind a server that flips a byte of the first N GETs of a key) come out right or
as an error with no file left; multipart ETags recomputed with the part size the ETag
implies or the store reports; S3's additional checksums asked with ChecksumMode, and a
store that refuses it (a scripted server on loopback) checked by size without a second
refusal."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import boto3
import pytest

from dev.servers.s3 import DevServer
from ingest.errors import IntegrityError
from ingest.records import S3Object
from ingest.s3 import BatchDownloader, Fetched, S3Connection
from ingest.s3.download import fetch_small, integrity_passes
from ingest.s3.keys import TMP_DIR_NAME
from ingest.s3.verify import implied_part_sizes, verify
from ingest.settings import Settings
from tests.helpers import body_for
from tests.scripted_server import Answer, ScriptedServer

MiB = 1024 * 1024


@pytest.fixture(scope="module")
def mangling(_clean_environment: None) -> Iterator[DevServer]:
    faults = [f"corrupt:/mangled/{k}:{n}" for k, n in (("once", 1), ("twice", 2), ("always", 99))]
    faults.append("corrupt:/bigmangled/ranged:1")
    with DevServer(faults=faults) as server:
        yield server


def settings_for(url: str, tmp_path: Path, **kw: Any) -> Settings:
    # Two retries after the first request: three passes for a body that fails its check.
    return Settings(data_dir=tmp_path, s3={"endpoint_url": url, "max_attempts": 2}, **kw)


def listed(client: Any, bucket: str, key: str) -> S3Object:
    head = client.head_object(Bucket=bucket, Key=key)
    return S3Object(
        bucket, key, head["ETag"].strip('"'), head["ContentLength"], head["LastModified"]
    )


def download(settings: Settings, objs: list[S3Object], root: Path) -> dict[str, Any]:
    with S3Connection.open(settings.s3) as conn:
        out = BatchDownloader(conn, root).run([(o, str(root / o.key)) for o in objs])
    return {o.key: outcome for o, _, outcome in out}


def test_a_corrupted_body_is_fetched_again_as_often_as_a_5xx_then_fails_with_no_file(
    mangling: DevServer, tmp_path: Path
) -> None:
    client = boto3.client("s3", endpoint_url=mangling.url, region_name="us-east-1")
    client.create_bucket(Bucket="mangled")
    bodies = {k: body_for(k, 50_000) for k in ("once", "twice", "always", "fine")}
    for key, body in bodies.items():
        client.put_object(Bucket="mangled", Key=key, Body=body)
    settings = settings_for(mangling.url, tmp_path)
    assert integrity_passes(settings.s3) == 3
    root = tmp_path / "out"
    got = download(settings, [listed(client, "mangled", k) for k in bodies], root)

    for key in ("once", "twice", "fine"):
        assert isinstance(got[key], Fetched), got[key]
        assert (root / key).read_bytes() == bodies[key]
    assert {k: got[k].attempts for k in ("once", "twice", "fine")} == {
        "once": 2,
        "twice": 3,  # corrupted twice in flight: right in the end
        "fine": 1,
    }
    failed = got["always"]
    assert isinstance(failed, IntegrityError)
    assert failed.attempts == 3
    assert "MD5" in str(failed) and "differs from the ETag" in str(failed)
    assert not (root / "always").exists()
    assert list((root / TMP_DIR_NAME).iterdir()) == []  # no wrong bytes anywhere


def test_a_big_object_fetched_in_ranges_is_checked_and_fetched_again(
    mangling: DevServer, tmp_path: Path
) -> None:
    """One of its range GETs is corrupted: the whole file fails its MD5 and is fetched
    again; nothing is left to resume from the wrong bytes."""
    client = boto3.client("s3", endpoint_url=mangling.url, region_name="us-east-1")
    client.create_bucket(Bucket="bigmangled")
    body = body_for("ranged", 3 * MiB + 5)
    client.put_object(Bucket="bigmangled", Key="ranged", Body=body)
    settings = settings_for(mangling.url, tmp_path)
    settings = settings.updated(s3={"range_threshold": MiB, "range_size": MiB})
    root = tmp_path / "out"
    got = download(settings, [listed(client, "bigmangled", "ranged")], root)["ranged"]
    assert isinstance(got, Fetched), got
    assert (root / "ranged").read_bytes() == body
    assert got.attempts == 8  # 4 ranges, twice
    assert list((root / TMP_DIR_NAME).iterdir()) == []


def _multipart(client: Any, bucket: str, key: str, parts: list[bytes]) -> None:
    upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
    done = []
    for n, part in enumerate(parts, 1):
        etag = client.upload_part(Bucket=bucket, Key=key, UploadId=upload, PartNumber=n, Body=part)[
            "ETag"
        ]
        done.append({"ETag": etag, "PartNumber": n})
    client.complete_multipart_upload(
        Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}
    )


def test_multipart_etags_are_recomputed_with_the_implied_or_reported_part_size(
    s3_server: DevServer, s3: Any, bucket: str, tmp_path: Path
) -> None:
    body = body_for("mp", 6 * MiB + 3000)
    # Parts of 5 MiB (a size the ETag implies) and of 5 MiB + 1000 bytes (it does not:
    # the store's answer to PartNumber=1 tells it).
    _multipart(s3, bucket, "aligned", [body[: 5 * MiB], body[5 * MiB :]])
    odd = 5 * MiB + 1000
    _multipart(s3, bucket, "odd", [body[:odd], body[odd:]])
    aligned, odd_obj = listed(s3, bucket, "aligned"), listed(s3, bucket, "odd")
    assert aligned.etag.endswith("-2") and odd_obj.etag.endswith("-2")
    assert implied_part_sizes(len(body), 2) == [5 * MiB, 4 * MiB]

    path = tmp_path / "body"
    path.write_bytes(body)
    wrong = tmp_path / "wrong"
    wrong.write_bytes(body[:-1] + b"\0")
    assert verify(s3, aligned, str(path), attempts=1) == "etag"
    assert verify(s3, odd_obj, str(path), attempts=1) == "etag"
    for obj in (aligned, odd_obj):
        with pytest.raises(IntegrityError, match=r"multipart ETag .* differs from the ETag"):
            verify(s3, obj, str(wrong), attempts=1)

    settings = settings_for(s3_server.url, tmp_path)
    got = download(settings, [aligned, odd_obj], tmp_path / "out")
    assert all(isinstance(v, Fetched) for v in got.values()), got
    assert (tmp_path / "out" / "odd").read_bytes() == body


def sha256_b64(data: bytes) -> str:
    return base64.b64encode(hashlib.sha256(data).digest()).decode()


def test_additional_checksums_are_asked_with_checksum_mode_and_a_refusal_is_remembered(
    tmp_path: Path,
) -> None:
    """An ETag that is no MD5 (an SSE-KMS object) is checked against the SHA-256 the store
    keeps; a store that answers ChecksumMode with 400 is not asked with it again."""
    body = b"0123456789" * 100
    etag = "kms-encrypted"  # not an MD5, not a multipart ETag
    with ScriptedServer() as server:
        server.script("/b/right", Answer(200, body))
        server.script(
            "HEAD /b/right", Answer(200, headers={"x-amz-checksum-sha256": sha256_b64(body)})
        )
        server.script("/b/bad", Answer(200, body))
        server.script(
            "HEAD /b/bad", Answer(200, headers={"x-amz-checksum-sha256": sha256_b64(body + b"!")})
        )
        settings = Settings(data_dir=tmp_path, s3={"endpoint_url": server.url, "max_attempts": 1})
        out = tmp_path / "out"
        with S3Connection.open(settings.s3) as conn:
            obj = S3Object("b", "right", etag, len(body), datetime.now(UTC))
            fetch_small(conn, obj, str(out / "right"), out)
            assert (out / "right").read_bytes() == body
            bad = S3Object("b", "bad", etag, len(body), datetime.now(UTC))
            with pytest.raises(IntegrityError, match=r"SHA256 .* differs from the object's"):
                fetch_small(conn, bad, str(out / "bad"), out)
            assert not (out / "bad").exists()
        heads = [h for p, h in server.seen if p.startswith("HEAD")]
        assert len(heads) == 3  # right once, bad twice (two passes)
        assert all(h.get("x-amz-checksum-mode") == "ENABLED" for h in heads)

    with ScriptedServer() as server:
        for key in ("k1", "k2"):
            server.script(f"/b/{key}", Answer(200, body))
            server.script(f"HEAD /b/{key}", Answer(400))
        settings = Settings(data_dir=tmp_path, s3={"endpoint_url": server.url})
        with S3Connection.open(settings.s3) as conn:
            for key in ("k1", "k2"):
                obj = S3Object("b", key, etag, len(body), datetime.now(UTC))
                fetch_small(conn, obj, str(out / key), out)
                assert (out / key).read_bytes() == body
        heads = [p for p, _ in server.seen if p.startswith("HEAD /b/")]  # (botocore then
        assert heads == ["HEAD /b/k1"]  # HEADs the bucket for its region) refused once
        gets = [h for p, h in server.seen if not p.startswith("HEAD")]
        assert not any("x-amz-checksum-mode" in {k.lower() for k in h} for h in gets)


def crc_reflected(data: bytes, poly: int, width: int) -> int:
    """A CRC bit by bit from its reflected polynomial (init and final XOR all ones): the
    test's own computation, independent of the library the download uses."""
    mask = (1 << width) - 1
    crc = mask
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ poly if crc & 1 else crc >> 1
    return crc ^ mask


# S3's names, the reflected polynomials and widths of CRC-32C and CRC-64/NVME.
CRCS = {"crc32c": (0x82F63B78, 32), "crc64nvme": (0x9A6C9329AC4BC9B5, 64)}


def crc_b64(name: str, data: bytes) -> str:
    poly, width = CRCS[name]
    return base64.b64encode(crc_reflected(data, poly, width).to_bytes(width // 8, "big")).decode()


def test_the_crc_of_the_test_is_the_catalogued_one() -> None:
    assert crc_reflected(b"123456789", *CRCS["crc32c"]) == 0xE3069283
    assert crc_reflected(b"123456789", *CRCS["crc64nvme"]) == 0xAE8B14860A799888


@pytest.mark.parametrize("name", ["crc32c", "crc64nvme"])
def test_crc32c_and_crc64nvme_check_bodies_corrupted_once_and_always(
    name: str, tmp_path: Path
) -> None:
    """A store that keeps only S3's CRC32C or CRC64NVME of an object (its ETag no MD5): a
    body corrupted once in flight is fetched again and lands right; one corrupted every
    time is a failed download naming the checksum, with no file left."""
    body = body_for(name, 20_000)
    bad = body[:-7] + bytes([body[-7] ^ 0x20]) + body[-6:]  # one bit flipped in flight
    header = {f"x-amz-checksum-{name}": crc_b64(name, body)}
    field = f"Checksum{name.upper()}"
    with ScriptedServer() as server:
        server.script("/b/once", Answer(200, bad), Answer(200, body))
        server.script("HEAD /b/once", Answer(200, headers=header))
        server.script("/b/always", Answer(200, bad))
        server.script("HEAD /b/always", Answer(200, headers=header))
        settings = Settings(data_dir=tmp_path, s3={"endpoint_url": server.url, "max_attempts": 2})
        out = tmp_path / "out"
        with S3Connection.open(settings.s3) as conn:
            once = S3Object("b", "once", "kms-encrypted", len(body), datetime.now(UTC))
            got = fetch_small(conn, once, str(out / "once"), out)
            assert (out / "once").read_bytes() == body
            assert got.attempts == 2
            # What the right bytes were checked by: the store's checksum, not the size.
            assert verify(conn.client, once, str(out / "once"), attempts=1) == field
            always = S3Object("b", "always", "kms-encrypted", len(body), datetime.now(UTC))
            with pytest.raises(IntegrityError, match=rf"{name.upper()} \S+ differs from") as exc:
                fetch_small(conn, always, str(out / "always"), out)
            assert exc.value.attempts == 3
            assert not (out / "always").exists()
            assert list((out / TMP_DIR_NAME).iterdir()) == []
        heads = [h for p, h in server.seen if p.startswith("HEAD /b/")]
        assert heads and all(h.get("x-amz-checksum-mode") == "ENABLED" for h in heads)


def test_the_crc_library_is_imported_only_when_a_store_offers_its_checksum() -> None:
    """A command's modules do not import it (and nothing imports awscrt, which botocore
    would load in every process); checking a file against a CRC64NVME does."""
    code = (
        "import sys, cli.main, flows.s3_ingest, ingest.s3.verify as v\n"
        "before = sorted(m for m in ('anycrc', 'awscrt') if m in sys.modules)\n"
        "v._hasher('ChecksumCRC64NVME')\n"
        "print(before, 'anycrc' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert out.stdout.split("\n")[-2] == "[] True"
