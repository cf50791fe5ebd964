"""The download folder's temporary folder (``.ingest-tmp``) in a folder others can write.

The review's probe: in a shared download folder, a planted ``.ingest-tmp`` symbolic link
had the run write its ``.part`` files through the link, and the sweep delete files named
``<digits>-*`` in the folder it named. A linked (or non-folder) ``.ingest-tmp`` now fails
the run in one line before anything is written or deleted, and the sweep deletes only
the names the product makes, of processes that are gone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ingest.s3 import files
from ingest.s3.keys import TMP_DIR_NAME


def dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture(autouse=True)
def _forget_folders() -> None:
    files._made_dirs.clear()  # what this process checked before: each test's folders are new


def test_a_linked_tmp_folder_is_refused_and_nothing_is_written_or_deleted(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    precious = {"123-report.pdf": b"report", "456-ledger.xlsx": b"ledger"}
    pid = dead_pid()
    precious[f"{pid}-0123abcd-1.part"] = b"even a name of ours, behind the link"
    for name, data in precious.items():
        (victim / name).write_bytes(data)
    shared = tmp_path / "shared-downloads"
    shared.mkdir()
    (shared / TMP_DIR_NAME).symlink_to(victim)

    with pytest.raises(files.UnsafeFolderError, match="is a symbolic link") as refused:
        files.sweep_temp(shared)
    assert "\n" not in str(refused.value)
    with pytest.raises(files.UnsafeFolderError, match="is a symbolic link"):
        files.temp_path(str(shared))
    assert {p.name: p.read_bytes() for p in victim.iterdir()} == precious

    (shared / TMP_DIR_NAME).unlink()
    (shared / TMP_DIR_NAME).write_bytes(b"a file where the folder goes")
    with pytest.raises(files.UnsafeFolderError, match="is not a folder"):
        files.temp_path(str(shared))


def test_the_sweep_deletes_only_names_it_made_of_processes_gone(tmp_path: Path) -> None:
    tmp = tmp_path / TMP_DIR_NAME
    tmp.mkdir()
    gone, alive = dead_pid(), os.getpid()
    ours_gone = tmp / f"{gone}-0123abcd-7.part"
    ours_alive = tmp / f"{alive}-0123abcd-8.part"
    others = [tmp / f"{gone}-notes.txt", tmp / f"{gone}-0123abcd-7.part.bak", tmp / "99-x.part"]
    for path in [ours_gone, ours_alive, *others]:
        path.write_bytes(b"x")
    outside = tmp_path / "kept.txt"
    outside.write_bytes(b"kept")
    (tmp / f"{gone}-0123abcd-9.part").symlink_to(outside)  # a link named as ours: not followed

    assert files.sweep_temp(tmp_path) == 1
    assert not ours_gone.exists()
    assert ours_alive.exists() and all(p.exists() for p in others)
    assert outside.read_bytes() == b"kept"
    written = files.temp_path(str(tmp_path))
    assert files._TEMP_NAME.match(Path(written).name)  # what it writes, it would sweep
