"""Artifacts sent side by side, and, inside ``beside()``, finished beside the rest of a
run's end instead of before it."""

from __future__ import annotations

import threading

import pytest

from tasks.artifacts import beside, sends


def test_a_block_waits_for_its_sends_and_raises_the_first_failure() -> None:
    done: list[str] = []

    def boom() -> None:
        raise RuntimeError("artifact refused")

    with pytest.raises(RuntimeError, match="artifact refused"), sends() as send:
        send(done.append, "table")
        send(boom)
    assert done == ["table"]


def test_inside_beside_a_send_outlasts_its_block_and_the_outer_block_waits() -> None:
    release = threading.Event()
    stored: list[str] = []
    after_summary: list[bool] = []

    def slow_artifact() -> None:
        release.wait(timeout=60)
        stored.append("run-summary")

    with beside():
        with sends() as send:
            send(slow_artifact)
        # the summary's block has ended with its artifact still in flight: the run's
        # commits go on beside it
        after_summary.append(bool(stored))
        release.set()
    assert after_summary == [False]
    assert stored == ["run-summary"]  # stored before beside() returned


def test_a_failed_artifact_inside_beside_is_raised_after_the_blocks_own_work() -> None:
    committed: list[str] = []

    def refused() -> None:
        raise RuntimeError("artifact refused")

    with pytest.raises(RuntimeError, match="artifact refused"), beside():
        with sends() as send:
            send(refused)
        committed.append("history")
    assert committed == ["history"]


def test_a_read_beside_the_block_still_returns_its_answer() -> None:
    with beside(), sends() as send:
        answer = send(lambda: 42)
        assert answer.result(timeout=60) == 42
