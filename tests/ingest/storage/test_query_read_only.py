"""``ingest query`` is read-only: the tables' views read a real lake; COPY, ATTACH,
INSTALL, LOAD, SET and DDL are refused with exit 2 before they run; no other file can
be read (``read_csv('/etc/passwd')``, the lake's own Parquet files by name); and nothing
in the lake or beside it changes."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli.main import app
from ingest import storage
from tests.helpers import files_under, write_rows

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def obj_row(key: str) -> dict[str, object]:
    return {
        "bucket": "b",
        "key": key,
        "etag": f"e-{key}",
        "size": len(key),
        "last_modified": T0,
        "local_path": f"/x/{key}",
        "status": "downloaded",
        "run_id": "r1",
        "ingested_at": T0,
    }


@pytest.fixture
def lake(data_dir: Path) -> Path:
    write_rows(data_dir, "s3_objects", "r1", "batch-0", [obj_row(f"k{i}") for i in range(7)])
    return data_dir


def ingest_query(data_dir: Path, sql: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["query", sql, "--data-dir", str(data_dir), "-f", "csv"])
    return result.exit_code, result.output


def test_the_views_read_the_lake(lake: Path) -> None:
    code, out = ingest_query(lake, "SELECT count(*) AS n, sum(size) AS s FROM s3_objects")
    assert code == 0, out
    assert out.splitlines()[-1] == "7,14"
    code, out = ingest_query(lake, "EXPLAIN SELECT key FROM s3_objects")
    assert code == 0, out
    # a table never written reads as empty, with its columns
    code, out = ingest_query(lake, "SELECT count(*) FROM documents")
    assert code == 0 and out.splitlines()[-1] == "0", out


@pytest.mark.parametrize(
    ("sql", "kind"),
    [
        ("COPY s3_objects TO '{lake}/lake/s3_objects/part-evil.parquet' (FORMAT parquet)", "COPY"),
        ("COPY (SELECT 1) TO '{lake}/out.csv'", "COPY"),
        ("ATTACH '{lake}/other.duckdb' AS other", "ATTACH"),
        ("INSTALL httpfs", "LOAD"),
        ("LOAD httpfs", "LOAD"),
        ("CREATE TABLE t AS SELECT * FROM s3_objects", "CREATE"),
        ("CREATE OR REPLACE TEMP VIEW s3_objects AS SELECT 1 AS key", "CREATE"),
        ("DROP VIEW s3_objects", "DROP"),
        ("SET enable_external_access = true", "SET"),
        ("SELECT 1; DROP VIEW s3_objects", "DROP"),
        ("CALL pragma_version()", "CALL"),
    ],
)
def test_statements_that_change_or_reach_out_are_refused(lake: Path, sql: str, kind: str) -> None:
    before = files_under(lake)
    code, out = ingest_query(lake, sql.format(lake=lake))
    assert code == 2, out
    assert f"{kind} statements are refused: ingest query is read-only" in out
    assert files_under(lake) == before
    assert storage.query(lake, "SELECT count(*) FROM s3_objects")[1] == [(7,)]


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_text('/etc/hostname')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM read_parquet('{lake}/lake/s3_objects/**/*.parquet')",
    ],
)
def test_no_file_but_the_views_can_be_read(lake: Path, sql: str) -> None:
    code, out = ingest_query(lake, sql.format(lake=lake))
    assert code == 2, out  # the query's mistake, as every mistake to fix
    assert "disabled by configuration" in out
    assert "root:" not in out


def test_python_objects_are_not_tables(lake: Path) -> None:
    """DuckDB's Python replacement scans would read any Arrow or pandas object in scope."""
    code, out = ingest_query(lake, "SELECT * FROM SETTINGS")
    assert code == 2 and "does not exist" in out, out


def test_an_sql_error_exits_2_as_a_refused_statement_does(lake: Path) -> None:
    code, out = ingest_query(lake, "SELEC key FROM s3_objects")
    assert code == 2 and "syntax error" in out, out
    assert "Traceback" not in out


@pytest.mark.parametrize("command", [["query", "SELECT count(*) FROM s3_objects"], ["search", "x"]])
def test_a_data_folder_without_tables_is_named_not_read_as_empty(
    lake: Path, tmp_path: Path, command: list[str]
) -> None:
    """A mistyped --data-dir used to answer 0 rows, as if the tables were empty."""
    typo = tmp_path / "dta"
    result = CliRunner().invoke(app, [*command, "--data-dir", str(typo)])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines() == [
        f"error: no tables in {typo}: no run has written this data folder (check --data-dir "
        "or INGEST_DATA_DIR; ingest s3, github and rest write it)"
    ]
    assert not typo.exists()  # nothing created by the look
    right = CliRunner().invoke(app, [*command, "--data-dir", str(lake)])
    assert right.exit_code == 0, right.output


def test_csv_shows_control_characters_of_keys_as_text(data_dir: Path) -> None:
    """A key holding an ESC sequence (a hostile object name) would recolour or rewrite the
    terminal the CSV is printed on: it is shown as ``\\x1b``; tabs and line ends are CSV's to
    quote; ``-f json`` keeps the exact text."""
    key = "docs/\x1b[2J\x1b]0;pwned\x07evil\x9b.txt"
    write_rows(data_dir, "s3_objects", "r1", "batch-0", [obj_row(key), obj_row("plain\tkey")])
    code, out = ingest_query(data_dir, "SELECT key FROM s3_objects ORDER BY key")
    assert code == 0, out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "docs/\\x1b[2J\\x1b]0;pwned\\x07evil\\x9b.txt" in out.splitlines()
    assert "plain\tkey" in out.splitlines()
    exact = CliRunner().invoke(
        app, ["query", "SELECT key FROM s3_objects", "--data-dir", str(data_dir), "-f", "json"]
    )
    assert "\\u001b[2J" in exact.output
