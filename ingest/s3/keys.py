"""Map S3 keys to local paths that can never escape the download folder.

A key is relative to the listing prefix and split on ``/``. Keys that cannot
be mapped faithfully become error rows instead of being rewritten, so that a
local path always names exactly one key (no two keys collide after
"sanitising"). Rejected: ``..`` or ``.`` segments, a leading ``/`` (absolute
path), empty segments (``a//b``), backslashes (a separator on Windows and in
zip-slip attacks), NUL and other control characters, a segment longer than
255 bytes, and the folder this project keeps its temporary files in.
Keys that end with ``/`` are folder markers and hold no document: they are
not ingested.

A prefix is a folder: ``docs`` lists and maps exactly what ``docs/`` does
(``folder_prefix``), as ``aws s3 sync s3://b/docs dir`` and ``aws s3 cp
--recursive`` do (awscli appends the ``/`` to the source of a directory
operation). A string prefix would list ``docsa.txt`` beside ``docs/a.txt`` and
map both to ``a.txt``: one file for two objects. So the key below the prefix
is the key without it, and two keys never share a local path. Where the
target folder ignores case or Unicode normal form (macOS, Windows, many SMB
shares), two keys can still land on one file; ``PathClaims`` with ``fold``
refuses the later one (``s3_refuse_folded_collisions``).
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import threading
import unicodedata
from collections.abc import Sequence

from ingest.errors import UnsafeKeyError

TMP_DIR_NAME = ".ingest-tmp"
_MAX_SEGMENT_BYTES = 255


def folder_prefix(prefix: str) -> str:
    """The prefix as the folder it names: ``docs`` -> ``docs/`` (see the module doc)."""
    return prefix if not prefix or prefix.endswith("/") else prefix + "/"


def relative_key(key: str, prefix: str) -> str:
    """The part of ``key`` below the folder ``prefix`` (as ``aws s3 sync`` maps it); a key
    outside it is returned whole (a listing under the prefix never holds one)."""
    folder = folder_prefix(prefix)
    return key[len(folder) :] if folder and key.startswith(folder) else key


def fold(path: str) -> str:
    """What a case- and normalisation-insensitive file system sees of a name."""
    return unicodedata.normalize("NFC", path).casefold()


class RunClaims:
    """The ``PathClaims`` of a run, one per download folder, shared by the run's batches
    in this process (held by its context, ``ingest.context.RunContext``)."""

    def __init__(self) -> None:
        self._claims: dict[tuple[str, bool], PathClaims] = {}
        self._lock = threading.Lock()

    def for_root(self, root: object, fold: bool) -> PathClaims:
        """The claims of the folder ``root``."""
        with self._lock:
            name = (str(root), fold)
            if name not in self._claims:
                self._claims[name] = PathClaims(fold=fold)
            return self._claims[name]


class PathClaims:
    """The local paths a run has given to keys, to refuse a second key for one path.

    With ``fold``, paths that differ only by case or Unicode normal form count as one,
    and a file already in the folder under such a variant of the name (another key's,
    from an earlier run) is refused too. Thread-safe: the batches of a run share one.
    """

    def __init__(self, *, fold: bool = False) -> None:
        self.fold = fold
        self._owners: dict[str, str] = {}
        self._folders: dict[str, dict[str, str]] = {}
        self._lock = threading.Lock()

    def claim(self, path: str, key: str) -> str | None:
        """Give ``path`` to ``key``; returns the key or file that already has it, or None."""
        name = fold(path) if self.fold else path
        with self._lock:
            owner = self._owners.setdefault(name, key)
            if owner != key:
                return owner
            if self.fold:
                return self._variant_on_disk(path)
        return None

    def _variant_on_disk(self, path: str) -> str | None:
        folder, base = os.path.split(path)
        entries = self._folders.get(folder)
        if entries is None:
            try:
                names = os.listdir(folder)
            except OSError:
                names = []
            entries = self._folders[folder] = {fold(n): n for n in names}
        found = entries.get(fold(base))
        if found is not None and found != base:
            return os.path.join(folder, found)
        entries[fold(base)] = base
        return None


def local_path_for(key: str, prefix: str, root: str | os.PathLike[str]) -> str:
    """The local path of ``key`` under ``root``, or UnsafeKeyError.

    A string, not a ``Path``: joining a ``Path`` cost about 4 us a key, most of the
    time of this function on the per-object path.

    Args:
        key: the full S3 key.
        prefix: the listing prefix (a folder: ``folder_prefix``), stripped from the key
            like ``aws s3 sync``.
        root: the download folder.
    """
    rel = relative_key(key, prefix)
    if not _plainly_safe(rel):
        reason = unsafe_reason(rel)
        if reason:
            raise UnsafeKeyError(f"unsafe key {key!r}: {reason}", key=key, attempts=0)
    top = os.fspath(root)
    # Belt and braces: the checks above make this impossible, keep it that way. Resolved
    # per folder (cached), not per object: a realpath costs a syscall per path component.
    path = os.path.join(top, rel)  # as joining its segments: none is empty, "." or ".."
    if not _real_dir(os.path.dirname(path)).startswith(_real_dir(top)):
        raise UnsafeKeyError(f"unsafe key {key!r}: resolves outside the folder", key=key)
    return path


@functools.lru_cache(maxsize=8192)
def _real_dir(path: str) -> str:
    return os.path.join(os.path.realpath(path), "")


# Keys that pass unsafe_reason at a glance (one match instead of a check per character and
# segment: ~1 us against ~10 us a key): ASCII, no segment starting with "." (so no "." or
# ".." and not the temporary folder), no empty segment, no backslash or control character.
_SEGMENT = r"[^./\\\x00-\x1f\x7f][^/\\\x00-\x1f\x7f]{0,254}"
_PLAIN = re.compile(f"{_SEGMENT}(?:/{_SEGMENT})*")


def _plainly_safe(rel: str) -> bool:
    return rel.isascii() and _PLAIN.fullmatch(rel) is not None


def unsafe_reason(rel: str) -> str | None:
    """Why a relative key cannot be a local path, or None when it can."""
    if not rel:
        return "empty name below the prefix"
    if rel.startswith("/"):
        return "absolute path"
    if "\\" in rel:
        return "backslash in key"
    if any(ord(c) < 32 or ord(c) == 127 for c in rel):
        return "control character in key"
    segments = rel.split("/")
    for segment in segments:
        if segment == "":
            return "empty path segment"
        if segment in (".", ".."):
            return f"{segment!r} path segment"
        if len(segment.encode("utf-8", "surrogatepass")) > _MAX_SEGMENT_BYTES:
            return "path segment longer than 255 bytes"
    if segments[0] == TMP_DIR_NAME:
        return f"{TMP_DIR_NAME!r} is reserved for temporary files"
    return None


def matches_filters(rel: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    """Glob filters on the key relative to the prefix (``*`` also matches ``/``).

    A key is kept when it matches any ``include`` pattern (or there are none)
    and no ``exclude`` pattern.
    """
    if include and not any(fnmatch.fnmatchcase(rel, p) for p in include):
        return False
    return not any(fnmatch.fnmatchcase(rel, p) for p in exclude)
