"""Object GETs against a scripted HTTP server on loopback: obstore's failures classified
by its exception types and the answer's status (retried, final, or handed to boto3), a
stalled body cut by the read timeout, and an endpoint whose certificate is signed by a
private CA named in AWS_CA_BUNDLE."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from ingest import s3
from ingest.errors import DownloadError
from ingest.records import S3Object
from ingest.s3.download import fetch_small
from ingest.settings import Settings
from tests.scripted_server import Answer, ScriptedServer, tls_server_context

BODY = b"0123456789" * 100


def settings_for(url: str, tmp_path: Path, **kw: object) -> Settings:
    return Settings(
        data_dir=tmp_path,
        s3={"endpoint_url": url, "max_attempts": 2, "stream_retries": 1, "read_timeout": 1.0},
        **kw,  # type: ignore[arg-type]
    )


def obj(key: str) -> S3Object:
    return S3Object("b", key, "", len(BODY), datetime.now(UTC))


def fetch(settings: Settings, key: str, tmp_path: Path) -> bytes:
    dest = tmp_path / "out" / key
    with s3.S3Connection.open(settings.s3) as conn:
        fetch_small(conn, obj(key), str(dest), tmp_path / "out")
    return dest.read_bytes()


def agents(server: ScriptedServer) -> list[str]:
    return ["boto3" if "Boto3" in h.get("User-Agent", "") else "obstore" for _, h in server.seen]


def test_throttling_is_retried_then_the_body_arrives(tmp_path: Path) -> None:
    with ScriptedServer() as server:
        server.script("/b/k", Answer(503, code="SlowDown"), Answer(500), Answer(200, BODY))
        assert fetch(settings_for(server.url, tmp_path), "k", tmp_path) == BODY
        assert agents(server) == ["obstore"] * 3  # s3_max_attempts=2 retries after the first


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [(403, "AccessDenied", "AccessDenied"), (404, "NoSuchKey", "NoSuchKey"), (401, "", "401")],
)
def test_refusals_are_final_after_one_request(
    tmp_path: Path, status: int, code: str, expected: str
) -> None:
    """403/404/401 are obstore's PermissionDenied/FileNotFound/Unauthenticated: an error row
    at once, no retry, no second client."""
    with ScriptedServer() as server:
        server.script("/b/k", Answer(status, code=code))
        with pytest.raises(DownloadError, match=expected) as failed:
            fetch(settings_for(server.url, tmp_path), "k", tmp_path)
        assert not failed.value.retryable
        assert agents(server) == ["obstore"]


def test_an_error_obstore_cannot_place_goes_to_boto3_once_not_retried_as_transport(
    tmp_path: Path,
) -> None:
    """A redirect without a Location is a GenericError with no status line and no transport
    failure: not retried as one, but asked once through boto3, whose answer decides."""
    with ScriptedServer() as server:
        server.script("/b/k", Answer(301, code="PermanentRedirect"), Answer(200, BODY))
        assert fetch(settings_for(server.url, tmp_path), "k", tmp_path) == BODY
        assert agents(server) == ["obstore", "boto3"]


def test_a_stalled_body_is_cut_by_the_read_timeout_and_resumed(tmp_path: Path) -> None:
    """Half the body, then silence for far longer than the read timeout (1 s here): the
    stream breaks on the read timeout and is resumed, every resumption stalls too, and the
    object becomes an error row naming the broken stream (not a run stuck for an hour)."""
    with ScriptedServer() as server:
        server.script("/b/k", Answer(200, BODY, stall=120))
        with pytest.raises(DownloadError, match="body stream broken 2 times"):
            fetch(settings_for(server.url, tmp_path), "k", tmp_path)
        assert agents(server) == ["obstore", "obstore"]  # s3_stream_retries=1 resumption


def test_aws_ca_bundle_is_trusted_by_the_obstore_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An HTTPS endpoint whose certificate a private CA signed: with AWS_CA_BUNDLE naming
    the CA, the GET goes through obstore (not a fallback) and the bytes are right."""
    ca_file, context = tls_server_context(tmp_path)
    monkeypatch.setenv("AWS_CA_BUNDLE", str(ca_file))
    with ScriptedServer(context) as server:
        server.script("/b/k", Answer(200, BODY))
        assert fetch(settings_for(server.url, tmp_path), "k", tmp_path) == BODY
        assert agents(server) == ["obstore"]
