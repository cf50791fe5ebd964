"""Local files of a download: temporary names, the sweep of leftovers, the integrity
check and the atomic publication.

Integrity is checked here, not by the HTTP client: size against the listing, MD5
against single-part ETags (``_verify``).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import os
import re
import stat
import uuid
from pathlib import Path

from ingest.errors import IntegrityError, ItemError, TerminalError
from ingest.keys import TMP_DIR_NAME
from ingest.records import S3Object
from ingest.s3.get import CHUNK

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
    """Remove temporary files left by runs whose process is gone: only regular files
    named as ``temp_path`` names them, in a temporary folder that is no symbolic link."""
    removed = 0
    tmp_dir = Path(root, TMP_DIR_NAME)
    if not tmp_dir.is_dir() and not tmp_dir.is_symlink():
        return 0
    for path in Path(tmp_folder(root)).iterdir():
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


def _verify(
    obj: S3Object, tmp: str, md5_hex: str | None, attempts: int, size: int | None = None
) -> None:
    """Size (``size`` bytes written, else the file's) and MD5 against the listing."""
    if size is None:
        size = os.stat(tmp).st_size
    if size != obj.size:
        raise IntegrityError(
            f"size {size} differs from the listed {obj.size}", key=obj.key, attempts=attempts
        )
    if obj.etag and not obj.is_multipart and obj.size:
        if md5_hex is None:
            md5_hex = _file_md5(tmp)
        if md5_hex != obj.etag.lower():
            raise IntegrityError(
                f"MD5 {md5_hex} differs from the ETag {obj.etag}", key=obj.key, attempts=attempts
            )


def _file_md5(path: str) -> str:
    md5 = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK * 4):
            md5.update(chunk)
    return md5.hexdigest()


def _publish(tmp: str, dest: str) -> None:
    """Atomically move a complete file to its final name. Not synced here, one by one: the
    batch syncs once after its renames and before its rows are written
    (``ingest.sync.download_batch``), so a power loss never leaves a renamed but empty file
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
