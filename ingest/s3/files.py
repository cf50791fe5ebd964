"""Local files of a download: temporary names, the sweep of leftovers, the integrity
check and the atomic publication.

Integrity is checked before publication, not by the HTTP client
(``ingest.s3.verify``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import stat
import uuid
from pathlib import Path

from ingest.errors import ItemError, TerminalError
from ingest.s3 import resume
from ingest.s3.keys import TMP_DIR_NAME

# Folders this process made or found (one mkdir per folder, not per object: at ~10 us a
# call it was a fifth of the client's CPU per small object). A folder removed under a
# running run is made again when the rename into it fails.
_made_dirs: set[str] = set()
_names = itertools.count()
_token = uuid.uuid4().hex[:8]


def ensure_dir(path: str) -> None:
    if path not in _made_dirs:
        os.makedirs(path, exist_ok=True)
        _made_dirs.add(path)


# The names ``temp_path`` makes: ``<pid>-<process token>-<counter>.part``. The sweep
# deletes nothing else, whatever else the folder holds.
_TEMP_NAME = re.compile(r"^(\d+)-[0-9a-f]{8}-\d+\.part$")


class UnsafeFolderError(TerminalError):
    """The download folder's temporary folder is a symbolic link, or not a folder."""


def tmp_folder(root: str | os.PathLike[str]) -> str:
    """``<root>/.ingest-tmp``, made if missing; refused (``UnsafeFolderError``) when it is a
    symbolic link or not a folder: in a shared download folder, whoever planted a link
    there would have the run write its partial files, and the sweep delete files, in the
    folder the link names."""
    path = os.path.join(root, TMP_DIR_NAME)
    if path in _made_dirs:
        return path
    with contextlib.suppress(FileExistsError):
        os.makedirs(path)
    mode = os.lstat(path).st_mode
    if stat.S_ISLNK(mode) or not stat.S_ISDIR(mode):
        what = "a symbolic link" if stat.S_ISLNK(mode) else "not a folder"
        raise UnsafeFolderError(
            f"{path} is {what}: temporary files are written only in a folder of the download "
            "folder itself; remove it and run again"
        )
    _made_dirs.add(path)
    return path


def temp_path(root: str | os.PathLike[str]) -> str:
    """A unique temporary name on the same filesystem as the destination.

    The owner's pid is part of the name so that leftovers of a killed run can
    be told from files a live run is still writing (``sweep_temp``). Paths on the
    per-object path are strings (a ``Path`` join costs microseconds).
    """
    tmp_dir = tmp_folder(root)
    return f"{tmp_dir}/{os.getpid()}-{_token}-{next(_names)}.part"


def remove(path: str) -> None:
    """Remove a file if it is there."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def sweep_temp(root: Path) -> int:
    """Remove temporary files left by runs whose process is gone, and resumable files of
    big objects no run asked for again within a week (``ingest.s3.resume``)."""
    removed = 0
    tmp_dir = Path(root, TMP_DIR_NAME)
    if not tmp_dir.is_dir() and not tmp_dir.is_symlink():
        return 0
    tmp = Path(tmp_folder(root))
    removed += resume.sweep(tmp)
    for path in tmp.iterdir():
        name = _TEMP_NAME.match(path.name)
        if name is None or not stat.S_ISREG(path.lstat().st_mode):
            continue
        if not _pid_alive(int(name.group(1))):
            path.unlink(missing_ok=True)
            removed += 1
    return removed


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _publish(tmp: str, dest: str) -> None:
    """Atomically move a complete file to its final name. Not synced here, one by one: the
    batch syncs once after its renames and before its rows are written
    (``ingest.s3.sync.download_batch``), so a power loss never leaves a renamed but empty file
    that a stored row calls downloaded."""
    try:
        folder = os.path.dirname(dest)
        ensure_dir(folder)
        try:
            os.replace(tmp, dest)
        except FileNotFoundError:  # the folder went away under the run: make it again
            _made_dirs.discard(folder)
            ensure_dir(folder)
            os.replace(tmp, dest)
    except (NotADirectoryError, IsADirectoryError, FileExistsError) as exc:
        raise ItemError(
            f"local path conflicts with another key (a file and a folder of the same name): {exc}"
        ) from exc
