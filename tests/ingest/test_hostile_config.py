"""Cheap fixes against careless or hostile configuration: a download folder over the
lake is refused; the serve database URL can come from a file, and its password is never
printed, even when the URL is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from deployments import database
from ingest.settings import Settings

PASSWORD = "pw-kept-in-a-file-8812"  # fake


@pytest.mark.parametrize(
    ("download", "refused"),
    [
        ("{data}", "holds the data folder"),
        ("{data}/..", "holds the data folder"),
        ("{data}/lake", "inside the data folder"),
        ("{data}/lake/s3_objects", "inside the data folder"),
        ("{data}/objects/../lake", "inside the data folder"),
        ("{data}/objects/mine", None),
        ("{data}-downloads", None),
    ],
)
def test_a_download_folder_over_the_lake_is_refused(
    tmp_path: Path, download: str, refused: str | None
) -> None:
    data = tmp_path / "data"
    settings = Settings(data_dir=data, s3={"download_dir": download.format(data=data)})
    why = settings.download_overlap("b")
    if refused is None:
        assert why is None
    else:
        assert why is not None and refused in why
    assert Settings(data_dir=data).download_overlap("b") is None  # the default objects/<bucket>


def test_the_database_url_can_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "db-url"
    path.write_text(f"postgresql://ingest:{PASSWORD}@127.0.0.1:5432/prefect\n")
    path.chmod(0o600)
    url = database.configured_url(Settings(serve={"database_url_file": path}))
    assert url == f"postgresql://ingest:{PASSWORD}@127.0.0.1:5432/prefect"
    parsed = database.parse(url)
    assert parsed.drivername == "postgresql+asyncpg" and parsed.password == PASSWORD
    # the variable wins over the file
    both = Settings(serve={"database_url": "sqlite:///x.db", "database_url_file": path})
    assert database.configured_url(both) == "sqlite:///x.db"
    with pytest.raises(database.DatabaseUrlError, match="cannot read the database URL file"):
        database.configured_url(Settings(serve={"database_url_file": tmp_path / "missing"}))


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o620])
def test_a_database_url_file_others_can_read_or_change_is_refused(
    tmp_path: Path, mode: int
) -> None:
    path = tmp_path / "db-url"
    path.write_text(f"postgresql://ingest:{PASSWORD}@127.0.0.1:5432/prefect\n")
    path.chmod(mode)
    with pytest.raises(database.DatabaseUrlError, match=f"has mode {mode:04o}") as refused:
        database.configured_url(Settings(serve={"database_url_file": path}))
    assert PASSWORD not in str(refused.value) and "chmod 600" in str(refused.value)
    path.chmod(0o640)  # read by the group (a secrets mount's fsGroup): allowed
    assert database.configured_url(Settings(serve={"database_url_file": path}))


def test_a_refused_url_from_a_file_never_shows_its_password(tmp_path: Path) -> None:
    path = tmp_path / "db-url"
    path.write_text(f"mysql://admin:{PASSWORD}@db.internal/prefect")
    result = CliRunner().invoke(app, ["serve"], env={"INGEST_SERVE_DATABASE_URL_FILE": str(path)})
    assert result.exit_code == 2, result.output
    assert "error:" in result.output and PASSWORD not in result.output
