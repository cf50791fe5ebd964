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
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
from collections.abc import Sequence

from ingest.errors import UnsafeKeyError

TMP_DIR_NAME = ".ingest-tmp"
_MAX_SEGMENT_BYTES = 255


def is_folder_marker(key: str) -> bool:
    """Keys ending in ``/`` are zero-byte folder placeholders made by consoles."""
    return key.endswith("/")


def relative_key(key: str, prefix: str) -> str:
    """The part of ``key`` below ``prefix`` (as ``aws s3 cp --recursive`` maps it)."""
    if prefix and key.startswith(prefix):
        rest = key[len(prefix) :]
        # "docs" lists "docs/a" as "a"; a prefix ending mid-segment ("docs/rep") keeps
        # the rest of the segment; a further "/" ("docs//a") stays, to be refused.
        if not prefix.endswith("/") and rest.startswith("/"):
            rest = rest[1:]
        return rest
    return key


def local_path_for(key: str, prefix: str, root: str | os.PathLike[str]) -> str:
    """The local path of ``key`` under ``root``, or UnsafeKeyError.

    A string, not a ``Path``: joining a ``Path`` cost about 4 us a key, most of the
    time of this function on the per-object path.

    Args:
        key: the full S3 key.
        prefix: the listing prefix, stripped from the key like ``aws s3 cp``.
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
