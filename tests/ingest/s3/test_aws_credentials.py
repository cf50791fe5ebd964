"""Credentials from a Prefect AwsCredentials block (``ingest.aws``): the S3 source's and
the lake's, through prefect-aws's own session, on a real Prefect server and S3 server."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from prefect_aws import AwsCredentials

from flows.s3_ingest import s3_ingest
from ingest.errors import CredentialsError
from ingest.s3.client import S3Connection
from ingest.settings import Settings
from ingest.storage import location

pytestmark = pytest.mark.usefixtures("prefect_harness")


def saved_block(region: str = "eu-west-3") -> tuple[str, str]:
    name = f"keys-{uuid.uuid4().hex[:8]}"
    key = f"AKIA{uuid.uuid4().hex[:12].upper()}"
    AwsCredentials(
        aws_access_key_id=key, aws_secret_access_key="block-secret-value", region_name=region
    ).save(name)
    return name, key


def test_the_s3_client_and_its_store_use_the_blocks_credentials(s3_server) -> None:
    name, key = saved_block()
    settings = Settings(s3={"credentials_block": name, "endpoint_url": s3_server.url})
    with S3Connection.open(settings.s3) as conn:
        client = conn.client
        assert client.meta.region_name == "eu-west-3"  # the block's region: none was set
        creds = client._request_signer._credentials.get_frozen_credentials()
        assert (creds.access_key, creds.secret_key) == (key, "block-secret-value")
        assert conn.session is not None
        assert conn.session.get_credentials().access_key == key  # obstore's provider's
        assert conn.store("some-bucket") is not None
        # Another block is another connection: credentials are never shared between them.
        other, other_key = saved_block()
        with S3Connection.open(
            Settings(s3={"credentials_block": other, "endpoint_url": s3_server.url}).s3
        ) as second:
            got = second.client._request_signer._credentials.get_frozen_credentials()
            assert got.access_key == other_key != key


def test_a_missing_block_is_a_clear_credentials_error(s3_server) -> None:
    settings = Settings(s3={"credentials_block": "no-such-block", "endpoint_url": s3_server.url})
    with pytest.raises(CredentialsError, match=r"no-such-block.*INGEST_S3_CREDENTIALS_BLOCK"):
        S3Connection.open(settings.s3)


def test_the_lake_reads_its_block_too(s3_server, tmp_path: Path) -> None:
    name, key = saved_block(region="us-east-1")
    loc = location.LakeLocation(
        root="s3://lake-bucket/data",
        local_dir=tmp_path,
        endpoint_url=s3_server.url,
        credentials_block=name,
    )
    resolved = location._resolve(loc)
    assert resolved.storage_options()["AWS_ACCESS_KEY_ID"] == key
    with pytest.raises(CredentialsError, match="INGEST_LAKE_CREDENTIALS_BLOCK"):
        location._resolve(
            location.LakeLocation(
                root="s3://lake-bucket/x",
                local_dir=tmp_path,
                endpoint_url=s3_server.url,
                credentials_block="nope",
            )
        )


def test_a_run_with_a_block_stores_every_object(
    s3, bucket: str, s3_server, data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(5):
        s3.put_object(Bucket=bucket, Key=f"in/{i}.txt", Body=f"text {i}".encode())
    name, _ = saved_block(region="us-east-1")
    monkeypatch.setenv("INGEST_S3_CREDENTIALS_BLOCK", name)
    summary = s3_ingest(
        bucket=bucket, prefix="in/", endpoint_url=s3_server.url, data_dir=str(data_dir)
    )
    assert summary.counts == {"downloaded": 5}
