"""Fixtures of the fault-injection suite (``make chaos``; a short subset in ``make test``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from dev.servers.faultproxy import FaultProxy
from dev.servers.s3 import DevServer
from tests.chaos.support import RESULTS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.chaos)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get("CHAOS_RESULTS")
    if target and RESULTS.trials:
        RESULTS.write(Path(target))


@pytest.fixture(scope="session")
def proxy(s3_server: DevServer) -> Iterator[FaultProxy]:
    """The fault proxy in front of the session's S3 server; each test sets its plan."""
    with FaultProxy(s3_server.url) as p:
        yield p


@pytest.fixture
def clean_proxy(proxy: FaultProxy) -> Iterator[FaultProxy]:
    proxy.plan([])
    yield proxy
    proxy.plan([])


def s3_client(url: str) -> Any:
    return boto3.client("s3", endpoint_url=url, region_name="us-east-1")
