"""``python -m dev.serve_demo`` (``ingest serve --demo`` of a checkout) with its ports
taken: it refuses before anything starts, naming the option that moves the server, and
serves on the ports given, written into the deployments' parameters."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from deployments import project
from dev import serve_demo


@contextlib.contextmanager
def taken(port: int) -> Iterator[None]:
    """Something listening on ``port`` (already the case when the bind fails)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
        except OSError:  # another process has it: taken all the same
            pass
        yield


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_default_ports_taken_refuse_before_anything_starts_then_other_ports_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INGEST_DATA_DIR", str(tmp_path / "data"))
    declared = serve_demo.DemoServers().endpoints
    s3_port = serve_demo.loopback_port(declared["s3_url"])
    assert s3_port is not None
    with taken(s3_port):
        assert serve_demo.main(["--port", str(free_port())]) == 1
        err = capsys.readouterr().err
        assert f"port {s3_port} for the demo S3 server is in use" in err and "--s3-port" in err
        assert not serve_demo.demo_home().exists()  # no Prefect server was started

        ports = {name: free_port() for name in serve_demo.SERVERS}
        with serve_demo.DemoServers(ports=ports) as demo:
            for name, port in ports.items():
                assert serve_demo.loopback_port(demo.endpoints[name]) == port
            nightly = project.deployment(
                project.with_parameters(project.load(), demo.overrides), "nightly"
            )["parameters"]
            assert nightly["endpoint_url"] == demo.endpoints["s3_url"]
            assert nightly["github_base_url"] == demo.endpoints["github_url"]
            client = boto3.client(
                "s3",
                endpoint_url=demo.endpoints["s3_url"],
                region_name="us-east-1",
                aws_access_key_id="demo",
                aws_secret_access_key="demo",
            )
            listed = client.list_objects_v2(Bucket=declared["bucket"])
            assert listed.get("KeyCount", 0) > 0  # seeded on the port given


def test_help_names_the_port_options_value_a_port(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        serve_demo.main(["--help"])
    shown = capsys.readouterr().out
    for option in serve_demo.SERVER_OPTIONS.values():
        assert f"{option} PORT" in shown, shown
    assert not any(name.upper() in shown for name in serve_demo.SERVER_OPTIONS), shown
