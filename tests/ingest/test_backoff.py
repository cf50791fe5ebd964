"""The one backoff policy (``ingest.backoff``) and the retry loops that use it."""

from __future__ import annotations

import logging

import pytest

from ingest.backoff import Backoff
from ingest.rest import ratelimit, shared
from ingest.s3 import get
from ingest.storage import lake
from tasks import s3 as s3_tasks


def test_delay_grows_to_its_cap_within_its_jitter() -> None:
    policy = Backoff(max_attempts=9, base=0.5, cap=3.0, jitter=0.5)
    ceilings = [0.5, 1.0, 2.0, 3.0, 3.0]
    for n, ceiling in enumerate(ceilings, start=1):
        assert policy.delay(n, rng=lambda: 0.0) == ceiling  # no jitter drawn
        assert policy.delay(n, rng=lambda: 1.0) == ceiling * 0.5  # the most jitter
    full = Backoff(base=1.0, cap=20.0, jitter=1.0)
    assert full.delay(3, rng=lambda: 1.0) == 0.0 and full.delay(3, rng=lambda: 0.25) == 3.0


def test_retrying_waits_between_attempts_and_raises_the_last_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    waits: list[float] = []
    calls = 0

    def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise OSError(f"disk full {calls}")
        return "written"

    policy = Backoff(max_attempts=3, base=1.0, cap=5.0, jitter=0)
    with caplog.at_level(logging.WARNING):
        assert policy.retrying(flaky, OSError, what="rows", sleep=waits.append) == "written"
    assert (calls, waits) == (3, [1.0, 2.0])
    assert "rows: disk full 1; again in 1.00 s" in caplog.text

    def broken() -> None:
        raise OSError("still full")

    waits.clear()
    with pytest.raises(OSError, match="still full"):
        policy.retrying(broken, OSError, what="rows", sleep=waits.append)
    assert waits == [1.0, 2.0]  # three attempts, two waits, then the error stands


def test_an_error_it_does_not_retry_goes_straight_through() -> None:
    waits: list[float] = []

    def wrong() -> None:
        raise ValueError("a bug")

    with pytest.raises(ValueError):
        Backoff().retrying(wrong, OSError, what="x", sleep=waits.append)
    assert waits == []


def test_every_retry_loop_uses_the_one_policy() -> None:
    assert ratelimit.RetryPolicy is Backoff
    for policy in (
        get.GET_BACKOFF,
        lake.COMMIT_BACKOFF,
        s3_tasks.STAGE_BACKOFF,
        shared.REFUSAL_BACKOFF,
    ):
        assert isinstance(policy, Backoff)
    assert lake.COMMIT_BACKOFF.max_attempts == lake.COMMIT_ATTEMPTS
    # The commit race's first wait stays short: 0.05-0.4 s.
    assert (
        0.05
        <= lake.COMMIT_BACKOFF.delay(1, rng=lambda: 1.0)
        < lake.COMMIT_BACKOFF.delay(1, rng=lambda: 0.0)
        == 0.4
    )
