"""No secret of the project crosses the Dask scheduler: tasks get settings without them.

A real ``dask scheduler`` and ``dask worker`` (``dev.servers.dask_cluster``), the
GitHub-compatible dev server that answers only with the token, a Prefect server
(the session's harness) and the lake on a moto bucket. The flow reaches the
scheduler through a relay on loopback that keeps every byte both ways: the task
arguments, pickled, go through it. The flow's process holds the GitHub token and
the serve database's password in its settings (``INGEST_GITHUB_TOKEN``,
``INGEST_SERVE_DATABASE_URL``); the worker has the token in its own environment.
The run stores every pull request, so the worker read the token where it runs, and
neither secret is in the bytes the scheduler saw, while the lake's address (another
field of the same settings) is: the relay sees the arguments.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dask
import pytest

from dev.servers.dask_cluster import DaskCluster
from dev.servers.github import DevGitHub
from dev.servers.s3 import DevServer
from ingest.settings import Settings
from tests.helpers import harness_api_url, rows

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]

TOKEN = "ghp_" + "RelayTokenValue0123456789abcdefABCDE"  # fake, built so no scanner flags it
DB_PASSWORD = "relay-db-password-4711"
REPOS = {"octo/a": 25, "octo/b": 15}


class Relay:
    """A TCP relay on loopback to ``upstream`` (host, port) that records what it carries."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.carried = bytearray()
        self.lock = threading.Lock()
        self.open: list[socket.socket] = []
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:  # closed: the relay stops
                return
            server = socket.create_connection(self.upstream)
            self.open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                with self.lock:
                    self.carried += chunk
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> Relay:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.listener.close()
        for s in self.open:
            s.close()


@pytest.fixture
def github() -> Iterator[DevGitHub]:
    with DevGitHub(repos=REPOS, token=TOKEN) as gh:
        yield gh


def test_task_arguments_on_the_wire_hold_no_secret(
    github: DevGitHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import boto3

    from flows.github_pulls import github_pulls

    database_url = f"postgresql+asyncpg://prefect:{DB_PASSWORD}@127.0.0.1:5432/prefect"
    worker_env = {"PREFECT_API_URL": harness_api_url(), "INGEST_GITHUB_TOKEN": TOKEN}
    with (
        DevServer() as lake_server,
        DaskCluster(tmp_path / "cluster", workers=1, env=worker_env) as cluster,
    ):
        host, port = cluster.address.removeprefix("tcp://").split(":")
        bucket = f"lake-{uuid.uuid4().hex[:10]}"
        s3 = boto3.client("s3", endpoint_url=lake_server.url, region_name="us-east-1")
        s3.create_bucket(Bucket=bucket)
        uri = f"s3://{bucket}/secrets-test"
        for k, v in {
            "INGEST_GITHUB_BASE_URL": github.url,
            "INGEST_GITHUB_TOKEN": TOKEN,
            "INGEST_SERVE_DATABASE_URL": database_url,
            "INGEST_LAKE_ENDPOINT_URL": lake_server.url,
            "INGEST_SHARED_LIMITS": "off",
        }.items():
            monkeypatch.setenv(k, v)
        assert Settings().github.token is not None  # the flow's own settings hold both
        with (
            Relay((host, int(port))) as relay,
            dask.config.set(
                {"distributed.comm.compression": None}  # the bytes as pickled, searchable
            ),
        ):
            monkeypatch.setenv("INGEST_DASK_ADDRESS", relay.address)
            summary: Any = github_pulls(
                repos=list(REPOS), data_dir=uri, task_runner="dask", per_page=10
            )
        carried = bytes(relay.carried)

        assert summary.complete and not summary.errors, summary
        lake = Settings(
            data_dir=uri, lake={"endpoint_url": lake_server.url}, local_dir=tmp_path
        ).location
        stored = rows(lake, "SELECT repo, count(*) AS n FROM pull_requests GROUP BY ALL")
        assert {r["repo"]: r["n"] for r in stored} == REPOS  # the worker's own token worked
        ran_on = rows(
            lake, "SELECT DISTINCT worker FROM task_timings WHERE task_name = 'fetch-pulls'"
        )
        assert [w["worker"] for w in ran_on] == ["w1"]  # the fetch ran on the Dask worker
    assert uri.encode() in carried  # the settings crossed the relay, pickled
    assert TOKEN.encode() not in carried
    assert DB_PASSWORD.encode() not in carried
