"""The database of the Prefect server that ``ingest serve`` starts.

SQLite under ``PREFECT_HOME`` is the embedded default: nothing to install, and
enough for one machine. Several workers and a busy nightly write task and flow
run states faster than one SQLite file takes them ("database is locked"), so
the server can use PostgreSQL instead: ``--database-url`` /
``INGEST_SERVE_DATABASE_URL``, handed to Prefect as
``PREFECT_SERVER_DATABASE_CONNECTION_URL``. The URL carries a password: it goes
into the server's environment only, and is shown with the password masked.
"""

from __future__ import annotations

import stat
from pathlib import Path

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

from ingest.errors import IngestError
from ingest.redact import register_secret
from ingest.settings import Settings

# Prefect's server talks to PostgreSQL through asyncpg and to SQLite through aiosqlite.
DRIVERS = {
    "postgresql": "postgresql+asyncpg",
    "postgres": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
}
ENV_NAME = "PREFECT_SERVER_DATABASE_CONNECTION_URL"


def configured_url(settings: Settings) -> str | None:
    """The URL from ``INGEST_SERVE_DATABASE_URL``, else read from the file that
    ``INGEST_SERVE_DATABASE_URL_FILE`` names (a secrets mount, a file of mode 600): either
    keeps the password off the command line, where ``ps`` shows it to every local user."""
    if settings.serve.database_url is not None:
        return settings.serve.database_url.get_secret_value() or None
    path = settings.serve.database_url_file
    if path is None:
        return None
    try:
        mode = Path(path).stat().st_mode
        if mode & 0o027:  # written by the group, or open to every local user
            raise DatabaseUrlError(
                f"the database URL file {path} has mode {stat.S_IMODE(mode):04o}: other users "
                "may read or change it; chmod 600 it (a Kubernetes secret: defaultMode 0400)"
            )
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise DatabaseUrlError(
            f"cannot read the database URL file {path}: {exc.strerror or exc}"
        ) from None
    return text or None


class DatabaseUrlError(IngestError, ValueError):
    """A database URL the Prefect server cannot use (the message never holds the password)."""


def parse(url: str) -> URL:
    """The URL with Prefect's async driver (``postgresql://`` becomes
    ``postgresql+asyncpg://``); its password is registered as a secret."""
    try:
        parsed = make_url(url.strip())
    except ArgumentError:
        raise DatabaseUrlError(
            "the database URL is not of the form postgresql+asyncpg://user:password@host:5432/"
            "database"
        ) from None
    if parsed.password:
        register_secret(str(parsed.password))
    driver = DRIVERS.get(parsed.drivername)
    if driver is None:
        raise DatabaseUrlError(
            f"database {parsed.drivername!r} is not one the Prefect server uses: give "
            "postgresql+asyncpg://user:password@host:5432/database (or sqlite+aiosqlite:///path)"
        )
    parsed = parsed.set(drivername=driver)
    if driver.startswith("postgresql") and not (parsed.host and parsed.database):
        raise DatabaseUrlError(
            f"{describe(parsed)} names no host or no database: give "
            "postgresql+asyncpg://user:password@host:5432/database"
        )
    return parsed


def server_env(url: URL) -> dict[str, str]:
    """The environment that points ``prefect server start`` at the database."""
    return {ENV_NAME: url.render_as_string(hide_password=False)}


def describe(url: URL) -> str:
    """The URL with its password masked, for messages."""
    return url.render_as_string(hide_password=True)


def kind(url: URL | None) -> str:
    """``PostgreSQL`` or ``SQLite`` (the embedded default when ``url`` is None)."""
    return "PostgreSQL" if url is not None and url.get_backend_name() == "postgresql" else "SQLite"
