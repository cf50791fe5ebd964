"""``make demo`` (``python -m dev.demo``) twice: the second empties the demo's folder first,
so its "first run" is a first run; a folder the demo did not write is never emptied. Its
last line names a DuckDB command that runs on this machine."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from dev import demo


def test_an_earlier_demos_folder_is_emptied_and_marked(tmp_path: Path) -> None:
    folder = tmp_path / "demo"
    demo.fresh_data_dir(folder, default=False)  # absent: created, marked
    assert sorted(p.name for p in folder.iterdir()) == [demo.MARKER]
    (folder / "_lake" / "s3_objects").mkdir(parents=True)
    (folder / "_lake" / "s3_objects" / "part-0.parquet").write_bytes(b"rows")
    (folder / "warehouse.duckdb").write_bytes(b"db")
    demo.fresh_data_dir(folder, default=False)
    assert sorted(p.name for p in folder.iterdir()) == [demo.MARKER]


def test_a_folder_the_demo_did_not_write_is_refused_and_kept(tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "warehouse.duckdb").write_bytes(b"my own")
    with pytest.raises(demo.NotTheDemosFolder, match="did not write"):
        demo.fresh_data_dir(mine, default=False)
    assert (mine / "warehouse.duckdb").read_bytes() == b"my own"
    assert demo.main(["--data-dir", str(mine)]) == 2
    assert (mine / "warehouse.duckdb").read_bytes() == b"my own"
    # data/demo is the demo's own: an older demo's folder (no marker yet) is emptied
    demo.fresh_data_dir(mine, default=True)
    assert sorted(p.name for p in mine.iterdir()) == [demo.MARKER]


def test_the_duckdb_command_it_prints_runs_without_duckdb_on_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import duckdb

    database = tmp_path / "warehouse.duckdb"
    with duckdb.connect(str(database)) as con:
        con.execute("CREATE VIEW answer AS SELECT 42 AS n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no duckdb on PATH
    command = demo.duckdb_command(database)
    assert not command.startswith("duckdb ")
    done = subprocess.run(
        [*shlex.split(command), "-c", "SELECT n FROM answer"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "42" in done.stdout
