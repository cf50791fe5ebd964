"""The batch tasks' runner of the thread runner starts its threads before the work."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from prefect import flow

from ingest.settings import Settings
from tasks.runners import batch_runner

pytestmark = [pytest.mark.flow, pytest.mark.usefixtures("prefect_harness")]


def test_the_thread_runner_has_its_threads_before_the_first_batch(data_dir: Path) -> None:
    @flow
    def holding() -> tuple[int, set[str]]:
        with batch_runner(Settings(data_dir=data_dir), 4) as runner:
            executor = runner._executor
            return len(executor._threads), {t.name for t in threading.enumerate()}

    started, alive = holding()
    assert started == 4
    assert len([name for name in alive if name.startswith("ThreadPoolExecutor")]) >= 4
