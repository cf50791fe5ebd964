"""Shared fixtures: a real S3-compatible server process on loopback, a
session-wide Prefect test harness, and a clean environment."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from deployments import local_api
from dev.servers.s3 import DevServer
from ingest import catalog

# Offline, quiet Prefect; fast task-run recording (the recorder batching every command's
# own server has: deployments.local_api.PREFECT_DEFAULTS).
os.environ.update(local_api.PREFECT_DEFAULTS)


@pytest.fixture(autouse=True, scope="session")
def _clean_environment() -> Iterator[None]:
    """No real AWS or GitHub credentials, proxies or INGEST_* settings leak into tests."""
    saved = dict(os.environ)
    for name in list(os.environ):
        if name.startswith(("AWS_", "INGEST_", "GITHUB_")) or name.lower().endswith("_proxy"):
            del os.environ[name]
    os.environ.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing-secret",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_CONFIG_FILE=os.devnull,
        AWS_SHARED_CREDENTIALS_FILE=os.devnull,
        NO_PROXY="127.0.0.1,localhost",
        # A command with no Prefect API starts a server of its own and stops it at its end,
        # as before the kept local server: a test leaves no process behind. The kept
        # server's own tests (tests/deployments/test_kept_server.py) set it themselves.
        INGEST_SERVE_LOCAL_SERVER_IDLE="0",
    )
    yield
    os.environ.clear()
    os.environ.update(saved)


@pytest.fixture(autouse=True, scope="session")
def _catalog() -> None:
    """Every table handed to storage, as a run's context and the command do."""
    catalog.load()


@pytest.fixture(scope="session")
def s3_server(_clean_environment: None) -> Iterator[DevServer]:
    """moto's S3 app in its own process on a free loopback port (keep-alive, counters)."""
    with DevServer() as server:
        yield server


@pytest.fixture(scope="session")
def s3(s3_server: DevServer) -> Any:
    return boto3.client("s3", endpoint_url=s3_server.url, region_name="us-east-1")


@pytest.fixture
def bucket(s3: Any) -> str:
    name = f"test-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(Bucket=name)
    return name


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture(scope="session")
def prefect_harness(_clean_environment: None) -> Iterator[None]:
    """One Prefect test server (fresh SQLite database) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


# Markers whose tests run only when asked for with -m: their own make targets.
ON_REQUEST = {
    "cluster": "long Dask scenario: make test-cluster",
    "server": "a server or browser of its own: make test-servers",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The long cluster scenarios (``-m cluster``, make test-cluster) and the tests that
    start servers of their own (``-m server``, make test-servers) run when asked for."""
    asked = config.getoption("-m") or ""
    for marker, reason in ON_REQUEST.items():
        if marker in asked:
            continue
        skip = pytest.mark.skip(reason=reason)
        for item in items:
            if marker in item.keywords:
                item.add_marker(skip)
