"""A concern's settings grouped in a sub-model keep their variable names: the environment,
a ``.env`` file and keyword arguments all reach the group, and the reference page lists
each of its variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.settings import AlertSettings, Settings


def test_the_alert_group_reads_its_flat_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_ALERT_BLOCK", "custom-webhook/nightly-alerts")
    monkeypatch.setenv("INGEST_ALERT_LATE_AFTER", "60")
    monkeypatch.setenv("INGEST_DATA_DIR", "elsewhere")  # a flat field beside it is untouched
    settings = Settings()
    assert settings.alert == AlertSettings(
        block="custom-webhook/nightly-alerts", late_after=60.0, stale_after=26 * 3600.0
    )
    assert settings.data_dir == Path("elsewhere")
    # A keyword argument for one field of the group keeps the others from the environment.
    assert Settings(alert={"stale_after": 100}).alert.late_after == 60.0
    # A value out of the field's bounds names the variable's field.
    monkeypatch.setenv("INGEST_ALERT_LATE_AFTER", "5")
    with pytest.raises(ValueError, match=r"alert\.late_after"):
        Settings()


def test_the_http_group_reads_its_flat_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INGEST_HTTP_MAX_PAGE_BYTES", "2048")
    monkeypatch.setenv("INGEST_HTTP_ADAPTIVE", "false")
    http = Settings().http
    assert (http.max_page_bytes, http.adaptive, http.initial_window) == (2048, False, 4)


def test_a_dotenv_file_reaches_the_group(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("INGEST_ALERT_STALE_AFTER=7200\n", encoding="utf-8")
    assert Settings().alert.stale_after == 7200.0


def test_the_reference_lists_the_groups_variables() -> None:
    from tools.gen_reference import render_settings

    page = render_settings()
    for name in (
        "INGEST_ALERT_BLOCK",
        "INGEST_ALERT_LATE_AFTER",
        "INGEST_ALERT_STALE_AFTER",
        "INGEST_HTTP_ADAPTIVE",
        "INGEST_HTTP_MAX_PAGE_BYTES",
    ):
        assert f"| `{name}` |" in page
    assert "INGEST_ALERT |" not in page and "INGEST_HTTP |" not in page


def test_a_groups_secret_never_leaves_with_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    """``serve.database_url`` is a secret like ``github_token``: a task's copy holds neither
    (not in its pickled bytes), the rest of the group stays, and the process that has the
    secret in its environment reads it back (``own_secret``)."""
    import pickle

    url = "postgresql+asyncpg://ingest:pw-9f3a7c@db:5432/prefect"
    monkeypatch.setenv("INGEST_SERVE_DATABASE_URL", url)
    monkeypatch.setenv("INGEST_GITHUB_TOKEN", "ghp_" + "x" * 36)
    settings = Settings(serve={"database_url_file": "/run/secrets/db"})
    assert {"github_token", "serve.database_url"} <= set(Settings.secret_fields())
    assert settings.serve.database_url is not None
    assert settings.serve.database_url.get_secret_value() == url
    sent = settings.without_secrets()
    wire = pickle.dumps(sent)
    assert b"pw-9f3a7c" not in wire and b"x" * 36 not in wire
    assert sent.serve.database_url is None and sent.github.token is None
    assert sent.serve.database_url_file == Path("/run/secrets/db")
    own = sent.own_secret("serve.database_url")
    assert own is not None and own.get_secret_value() == url
    assert settings.serve.database_url is not None  # the original keeps its secret
