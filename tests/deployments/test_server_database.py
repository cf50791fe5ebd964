"""The database URL of ``ingest serve``: normalised for Prefect, refused with a clear
error when unusable, its password never in a message."""

from __future__ import annotations

import pytest

from deployments import database
from ingest.redact import redact


def test_postgresql_urls_get_prefects_async_driver() -> None:
    for scheme in ("postgresql", "postgres", "postgresql+asyncpg"):
        url = database.parse(f"{scheme}://prefect:pw-one-2-three@db.example.com:5433/prefect")
        env = database.server_env(url)
        assert env == {
            "PREFECT_SERVER_DATABASE_CONNECTION_URL": (
                "postgresql+asyncpg://prefect:pw-one-2-three@db.example.com:5433/prefect"
            )
        }
        assert database.kind(url) == "PostgreSQL"
        assert (
            database.describe(url) == "postgresql+asyncpg://prefect:***@db.example.com:5433/prefect"
        )


def test_percent_encoded_password_is_decoded_for_the_server_and_masked() -> None:
    url = database.parse("postgresql://prefect:p%40ss%3Aword-9@db/prefect")
    assert url.password == "p@ss:word-9"
    assert "p@ss:word-9" not in database.describe(url)
    # registered: any message that carries it is masked
    assert redact("connect failed with p@ss:word-9") == "connect failed with ***"


def test_sqlite_is_the_default_kind() -> None:
    assert database.kind(None) == "SQLite"
    assert database.kind(database.parse("sqlite+aiosqlite:///tmp/prefect.db")) == "SQLite"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("mysql://u:hunter22-x@db/prefect", "database 'mysql' is not one the Prefect server uses"),
        ("postgresql://u:hunter22-x@db", "names no host or no database"),
        ("not a url at all", "is not of the form postgresql+asyncpg://"),
    ],
)
def test_unusable_urls_are_refused_without_the_password(url: str, message: str) -> None:
    with pytest.raises(database.DatabaseUrlError) as info:
        database.parse(url)
    assert message in str(info.value)
    assert "hunter22-x" not in str(info.value)
