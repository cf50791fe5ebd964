"""Exactly which extractor made a row: per kind, its code version, its libraries' versions
and the options that change its output.

``documents.extractor_version`` (and every structured row's) is, for a PDF::

    2.0 pdf/3 pypdfium2=4.30.0 pdfminer.six=20250506 max_pages=5000 ocr=off
    max_chars=10000000 chunks=2000/200

* ``EXTRACTOR_VERSION`` (``ingest.extract``): the release of the whole, bumped when
  something every kind shares changes (the row layout, clean-up of all text);
* ``pdf/3``: the code version of that kind's extractor (``CODE``), bumped when its
  module changes what it outputs;
* the installed versions of the libraries that kind reads with (``LIBRARIES``), so an
  upgrade of pypdfium2 re-extracts the PDFs and nothing else;
* the settings that change that kind's output (page cap and OCR for PDFs; the bound on
  a document's characters, chunk size and overlap for all).

The nightly run compares each stored ``documents`` row with the string for the row's
kind (``ingest.s3.changes.diff_chunk``) and re-extracts exactly the documents whose string
differs; ``ingest reextract`` does the same on demand.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Iterable

from ingest.extract import EXTRACTOR_VERSION, TEXT_KINDS
from ingest.records import Document
from ingest.settings import Extracting

# Code version of each kind's extractor: bump the kind whose output a change alters.
CODE: dict[str, int] = {
    "pdf": 3,  # 2: pages, markdown with font-size headings, common metadata, chunks;
    # 3: pages and markdown within extract_max_chars, heading-like text lines escaped
    "dxf": 3,  # 2: pages per layout, attributes, drawing data, header dates; 3: extents
    "dwg": 2,  # 1: read with ezdwg into the DXF model (before: unsupported, by ``detect``);
    # 2: R13 and R14 without units (1 gave them the model's default, meters)
    "docx": 3,  # 2: markdown from styles, modified and application; 3: heading-like text escaped
    "html": 3,  # 2: markdown from tags, encoding confidence; 3: <meta> author/generator,
    # heading-like text escaped
    "text": 2,  # 2: encoding confidence, language
    "detect": 1,  # empty, unsupported: told from the first bytes
}
LIBRARIES: dict[str, tuple[str, ...]] = {
    "pdf": ("pypdfium2", "pdfminer.six"),
    "dxf": ("ezdxf",),
    "dwg": ("ezdwg", "ezdxf"),
    "docx": ("python-docx",),
    "html": ("selectolax", "charset-normalizer"),
    "text": ("charset-normalizer",),
    "detect": (),
}
KINDS = ("pdf", "dxf", "docx", "html", *TEXT_KINDS, "dwg", "unsupported", "")


def family(kind: str) -> str:
    """The extractor that reads ``kind``: txt, csv... are read by ``text``; unknown
    content is settled by ``detect``. A DWG's row has the string of ``dwg`` whether it
    was read or refused (R12 and older): a new ezdwg re-reads both."""
    if kind in TEXT_KINDS:
        return "text"
    return kind if kind in CODE and kind != "detect" else "detect"


@functools.cache
def _library_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def version_for(kind: str, settings: Extracting) -> str:
    """The exact, complete extractor string of a row of ``kind`` under ``settings``."""
    name = family(kind)
    parts = [EXTRACTOR_VERSION, f"{name}/{CODE[name]}"]
    parts += [f"{lib}={_library_version(lib)}" for lib in LIBRARIES[name]]
    if name == "pdf":
        parts.append(f"max_pages={settings.extract.max_pages}")
        parts.append(
            f"ocr={settings.ocr.languages}/{settings.ocr.max_pages}/{settings.ocr.dpi}"
            if settings.ocr.enabled
            else "ocr=off"
        )
    if name != "detect":
        parts.append(f"max_chars={settings.extract.max_chars}")  # where text and pages are cut
        parts.append(f"chunks={settings.chunk.chars}/{settings.chunk.overlap}")
    return " ".join(parts)


def versions(settings: Extracting) -> dict[str, str]:
    """``version_for`` of every kind, for comparing stored rows (kind -> string)."""
    return {kind: version_for(kind, settings) for kind in KINDS}


def release(version: str | None) -> tuple[int, ...]:
    """The ``EXTRACTOR_VERSION`` a stored string starts with, as numbers (``2.0`` ->
    ``(2, 0)``); ``()`` for none or an unreadable one."""
    head = (version or "").split(" ", 1)[0]
    try:
        return tuple(int(p) for p in head.split("."))
    except ValueError:
        return ()


def stamp(docs: Iterable[Document], settings: Extracting, *, keep: str) -> None:
    """Record on each row the string of its kind (but on rows whose version is ``keep``:
    an interrupted extraction, which must not look current)."""
    table = versions(settings)
    for doc in docs:
        if doc.extractor_version != keep:
            doc.extractor_version = table.get(doc.kind) or version_for(doc.kind, settings)
