"""Renames that survive a power loss: the file's bytes reach the disk before its new
name does, and the new name reaches the disk before anything points at it.

A rename is atomic for readers, but without ``fsync`` a crash can leave the new
name pointing at an empty or partial file (the data still in the page cache when
the rename was already journalled). ``replace`` syncs the file, renames, then
syncs the folder that holds the name. Where many small files are renamed at once
(a download batch), one ``sync_all`` after the renames and before anything
points at them costs less than a sync per file (measured here on 30 KB files:
~2-3 ms more per file with a file and folder sync, nothing measurable with one
sync per 250 files).
"""

from __future__ import annotations

import os
from pathlib import Path


def fsync_file(path: Path) -> None:
    """Flush a file's bytes to the disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (names created, renamed or removed in it) to the disk."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # a platform that cannot open folders (Windows): nothing to flush
        return
    try:
        os.fsync(fd)
    except OSError:  # some filesystems refuse fsync on a folder; the rename still stands
        pass
    finally:
        os.close(fd)


def replace(tmp: Path, final: Path) -> None:
    """``os.replace(tmp, final)`` with the file synced before and its folder after."""
    fsync_file(tmp)
    os.replace(tmp, final)
    fsync_dir(final.parent)


def sync_all() -> None:
    """Flush every file written and renamed so far to the disk (``sync``)."""
    os.sync()
