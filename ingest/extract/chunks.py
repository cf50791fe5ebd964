"""Chunks for retrieval: each page's text cut at headings and paragraphs.

A chunk is a span ``[start, end)`` of one page's text (``document_pages.text``), so its
text is exactly that part of the page, and the spans of a page cover every character of
it (each chunk after the first of a section begins ``overlap`` characters before the
previous one ends). The cuts, in order of preference:

1. before every heading line (the headings of the markdown rendition, found in the text
   in order): a chunk never spans two sections, and carries its heading path
   (``Materials > Pipes``);
2. within a section longer than ``size`` characters, after the last paragraph break
   (a blank line) in the second half of the window, else the last line break, else the
   last space, else at ``size`` exactly.

Made in the worker with the text, as compact ``[page, start, end, heading]`` lists
(``Extraction.structure["chunks"]``); ``ingest.extract.structure`` turns them into
``document_chunks`` rows with their text and a stable id: a hash of the object's
bucket, key and ETag and the chunk's page and span, so an unchanged document keeps
its chunk ids night after night (and a changed one, or new chunk settings, gets new
ones).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from ingest.extract.base import Extraction

DEFAULT_SIZE = 2000
DEFAULT_OVERLAP = 200
MAX_CHUNKS = 200_000  # per document: the worker's reply stays bounded


def headings_of(markdown: str | None) -> list[tuple[int, str]]:
    """``(level, text)`` of each ``#`` heading line of a markdown rendition, in order."""
    out: list[tuple[int, str]] = []
    for line in (markdown or "").splitlines():
        if line.startswith("#"):
            level = len(line) - len(line.lstrip("#"))
            text = line[level:].strip()
            if 1 <= level <= 6 and text:
                out.append((level, text))
    return out


def _cut(text: str, lo: int, hi: int) -> int:
    """Where to end a chunk that may end anywhere in ``(lo, hi]``."""
    for sep in ("\n\n", "\n", " "):
        at = text.rfind(sep, lo, hi)
        if at > lo:
            return at + len(sep)
    return hi


def _overlap_start(text: str, lo: int, pos: int) -> int:
    """The overlap begins at a word: after the first space or line break in ``[lo, pos)``."""
    for i in range(lo, pos):
        if text[i] in " \n":
            return i + 1 if i + 1 < pos else lo
    return lo


def add_chunks(x: Extraction, size: int = DEFAULT_SIZE, overlap: int = DEFAULT_OVERLAP) -> None:
    """Chunk an ``ok`` extraction's pages (or its whole text) into ``structure["chunks"]``."""
    if x.status != "ok":
        return
    pages = x.structure.get("pages") or [x.text]
    headings = headings_of(x.structure.get("markdown"))
    x.structure["chunks"] = chunk_pages(pages, headings, size=size, overlap=overlap)


def chunk_pages(
    pages: Sequence[str],
    headings: Sequence[tuple[int, str]] = (),
    *,
    size: int = DEFAULT_SIZE,
    overlap: int = DEFAULT_OVERLAP,
) -> list[list[object]]:
    """``[page, start, end, heading_path]`` of each chunk of the pages (pages from 1)."""
    size = max(1, size)
    overlap = max(0, min(overlap, size // 2))
    out: list[list[object]] = []
    stack: list[tuple[int, str]] = []
    wanted = 0  # the next heading to look for
    for number, text in enumerate(pages, start=1):
        # Sections: cut before each heading line found (in order) on this page.
        # (start, heading path from there)
        sections: list[tuple[int, str]] = [(0, " > ".join(t for _l, t in stack))]
        offset = 0
        for line in text.split("\n"):
            if wanted < len(headings) and line.strip() == headings[wanted][1]:
                level, title = headings[wanted]
                wanted += 1
                while stack and stack[-1][0] >= level:
                    stack.pop()
                stack.append((level, title))
                path = " > ".join(t for _l, t in stack)
                if offset == sections[-1][0]:
                    sections[-1] = (offset, path)
                else:
                    sections.append((offset, path))
            offset += len(line) + 1
        bounds = [s for s, _p in sections] + [len(text)]
        for (start, heading), end in zip(sections, bounds[1:], strict=True):
            pos = start
            first = True
            while True:
                begin = pos if first else _overlap_start(text, max(start, pos - overlap), pos)
                stop = end if end - begin <= size else _cut(text, begin + size // 2, begin + size)
                if stop <= pos:  # the overlap ate the window: move on by the window
                    stop = min(end, pos + size)
                out.append([number, begin, stop, heading])
                if len(out) >= MAX_CHUNKS or stop >= end:
                    break
                pos, first = stop, False
            if len(out) >= MAX_CHUNKS:
                return out
    return out


def chunk_id(bucket: str, key: str, etag: str, page: int, start: int, end: int) -> str:
    """The chunk's stable id: the same object version and span, the same id."""
    raw = f"{bucket}\0{key}\0{etag}\0{page}\0{start}\0{end}".encode()
    return hashlib.sha256(raw).hexdigest()[:32]
