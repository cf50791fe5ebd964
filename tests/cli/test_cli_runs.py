"""A command's flow run in the foreground: Prefect's heartbeat thread only when asked for."""

from __future__ import annotations

import pytest
from prefect import flow
from prefect.settings import get_current_settings

from cli.running import foreground


@flow
def _observe() -> int | None:
    """The heartbeat setting the flow engine reads (``heartbeat_seconds``) inside the run."""
    return get_current_settings().flows.heartbeat_frequency


def test_a_command_run_has_no_heartbeat_thread(prefect_harness: None) -> None:
    assert foreground(_observe) is None
    assert _observe() == 180  # Prefect's default: a run started any other way keeps it
    assert get_current_settings().flows.heartbeat_frequency == 180


def test_an_explicit_heartbeat_setting_wins(
    prefect_harness: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PREFECT_FLOWS_HEARTBEAT_FREQUENCY", "60")
    assert foreground(_observe) == 180  # left to Prefect, which reads its own settings
