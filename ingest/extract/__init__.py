"""Text extraction: every stored document becomes clean, searchable text.

One module per format (``pdf``, ``dxf``, ``dwg``, ``docx``, ``html``, ``text``), the
kind told from the content by ``detect``; ``extract_document`` is the one
entry point and never raises for a bad document: the outcome is a status
(ok / empty / encrypted / unsupported / failed) with the error message.
Timeouts and crashed parsers are handled one level up, by ``pool``, which
runs this function in warm worker processes with time and memory limits.

OCR of image-only PDF pages (``ocr``) is off by default. To enable it:
``apt-get install tesseract-ocr tesseract-ocr-kor``, install the ``ocr`` extra
(``uv sync --extra ocr``; ``make setup`` installs all extras), and set
``INGEST_OCR_ENABLED=true`` (page cap ``INGEST_OCR_MAX_PAGES``, queue
``INGEST_OCR_QUEUE_SIZE``; see ``ingest.settings``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from ingest.extract.base import (
    EncryptedDocumentError,
    ExtractError,
    Extraction,
    UnsupportedFormatError,
)
from ingest.extract.chunks import DEFAULT_OVERLAP, DEFAULT_SIZE, add_chunks
from ingest.extract.detect import HEAD, detect_kind
from ingest.extract.metadata import complete

if TYPE_CHECKING:  # a name for the checker only: the workers never import pyarrow's records
    from ingest.records import DocumentStatus

# Bump when a change shared by every extractor changes its output: every document is
# re-extracted. A change to one kind's extractor bumps that kind's code version instead
# (``ingest.extract.provenance.CODE``): only the documents of that kind are re-extracted.
# 2.0: pages, chunks, markdown, drawing data and common metadata for every kind.
EXTRACTOR_VERSION = "2.0"

IN_MEMORY_BYTES = 32 * 1024 * 1024
# Kinds whose outcome the first bytes decide (the error names them): the rest of the file
# is not read. A DWG's first bytes decide only when they name a version no parser reads
# (``_decided_by_head``).
_HEAD_IS_ENOUGH = ("unsupported",)
TEXT_KINDS = ("txt", "csv", "md", "json", "xml")
_T = TypeVar("_T", bound="_Outputs")


def extract_document(
    source: bytes | Path,
    name: str = "",
    *,
    max_pages: int = 5000,
    in_memory_bytes: int = IN_MEMORY_BYTES,
) -> Extraction:
    """Extract one document, from its bytes or its path; ``name`` only helps detection.

    Small files are read whole; a large PDF is handed to pdfium as a path so it
    is streamed from disk rather than copied into memory.
    """
    if isinstance(source, Path):
        name = name or source.name
        size = source.stat().st_size
        with source.open("rb") as f:
            head = f.read(HEAD)
        settled = settle_by_head(head, size, name)  # the rest of such a file is not read
        if settled is not None:
            return settled
        # A zip is told (DOCX or not) from its whole package.
        data = source.read_bytes() if head.startswith(b"PK\x03\x04") else None
        kind = detect_kind(data if data is not None else head, name)
        if kind == "dwg":
            data = None  # ezdwg reads the file by its path
        elif data is None and size <= in_memory_bytes:
            data = source.read_bytes()
    else:
        data, size = source, len(source)
        if size == 0:
            return _empty(name)
        kind = detect_kind(data, name)
    body: bytes | Path = data if data is not None else source
    try:
        return complete(_dispatch(kind, body, max_pages))
    except EncryptedDocumentError as exc:
        return _not_read(kind, "encrypted", str(exc))
    except UnsupportedFormatError as exc:
        return _not_read(kind, "unsupported", str(exc))
    except ExtractError as exc:
        return _not_read(kind, "failed", str(exc))
    except MemoryError:
        return _not_read(kind, "failed", "MemoryError: over the worker's memory limit")
    except Exception as exc:  # a parser bug on one file must become that file's row
        return _not_read(kind, "failed", f"{type(exc).__name__}: {exc}"[:2000])


def extract_by_head(path: Path, name: str = "") -> Extraction | None:
    """The outcome of a file its first bytes decide (zero bytes, unsupported content, a DWG
    drawing of a version no parser reads), or None when a parser must read it.

    No parser runs: the size, a 4 KB read and the magic tests of ``detect`` are all it
    does, so the flow's process can settle these itself instead of paying a worker's round
    trip per file (a bucket of mostly unsupported files is thousands of them a run). A zip
    is left to the worker: telling a DOCX from another zip opens the package.
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            head = f.read(HEAD)
    except OSError:
        return None  # the worker's attempt reports it, as for any unreadable file
    return settle_by_head(head, size, name or path.name)


def settle_by_head(head: bytes, size: int, name: str) -> Extraction | None:
    """``extract_by_head`` of a file whose first ``HEAD`` bytes (all of them when it is
    shorter) and size are in hand: a download has them as it writes the file."""
    if size == 0:
        return _empty(name)
    head = head[:HEAD]
    if head.startswith(b"PK\x03\x04"):
        return None
    kind = detect_kind(head, name)
    if not _decided_by_head(kind, head):
        return None
    try:
        return _dispatch(kind, head, 0)
    except UnsupportedFormatError as exc:
        return _not_read(kind, "unsupported", str(exc))


def extract_stored(
    path: str,
    name: str,
    max_pages: int,
    in_memory_bytes: int,
    chunk_chars: int = DEFAULT_SIZE,
    chunk_overlap: int = DEFAULT_OVERLAP,
    *,
    max_chars: int | None = None,
) -> Extraction:
    """The job a pool worker runs for one stored file (see ``ingest.extract.batch``): the
    extraction, with its chunks for retrieval (``ingest.extract.chunks``).

    With ``max_chars``, a longer text is cut in the worker, before it travels to the
    flow's process: the row keeps the first ``max_chars`` characters, and its metadata
    says where it was cut and how long the whole text was (``text_cut``); the pages'
    texts and the markdown obey the same bound (``cut_text``)."""
    x = extract_document(Path(path), name, max_pages=max_pages, in_memory_bytes=in_memory_bytes)
    x = cut_text(x, max_chars)
    add_chunks(x, chunk_chars, chunk_overlap)
    return x


class _Outputs(Protocol):
    """What ``cut_text`` bounds: an ``Extraction`` in the worker, a ``Document`` after OCR."""

    text: str
    metadata: dict[str, Any]
    structure: dict[str, Any]


def cut_text(result: _T, max_chars: int | None) -> _T:
    """``result`` with its text, its pages' texts and its markdown each cut to
    ``max_chars`` characters, each cut recorded in the metadata as the text's is.

    * ``text_cut``: ``{kept, chars}`` of ``documents.text``;
    * ``pages_cut``: the pages (``document_pages``) are kept in order while their texts
      add up to ``max_chars``, the page that crosses it cut there and the later ones
      dropped: ``{pages, of, kept, chars}`` (pages kept and had, characters kept and had);
    * ``markdown_cut``: ``{kept, chars}`` of ``documents.markdown``.

    The chunks are cut from the pages afterwards (``add_chunks``), so they hold no more.
    A hostile document thus yields at most ``max_chars`` characters in each of the text,
    the pages and the markdown, however many pages it has."""
    if max_chars is None:
        return result
    result.text = _cut(result, "text", result.text, max_chars)
    pages = result.structure.get("pages")
    if pages:
        total = sum(len(p) for p in pages)
        if total > max_chars:
            kept: list[str] = []
            room = max_chars
            for page in pages:
                if room <= 0:
                    break
                kept.append(page[:room])
                room -= len(kept[-1])
            result.structure["pages"] = kept
            result.metadata["pages_cut"] = {
                "pages": len(kept),
                "of": len(pages),
                "kept": max_chars,
                "chars": total,
            }
            _note(
                result,
                f"page texts cut at {max_chars:,} of {total:,} characters "
                f"({len(kept):,} of {len(pages):,} pages kept)",
            )
    if result.structure.get("markdown"):
        result.structure["markdown"] = _cut(
            result, "markdown", result.structure["markdown"], max_chars
        )
    return result


def _cut(result: _Outputs, what: str, text: str, max_chars: int) -> str:
    """``text`` (the ``what`` of ``result``) cut to ``max_chars``, the cut recorded."""
    if len(text) > max_chars:
        result.metadata[f"{what}_cut"] = {"kept": max_chars, "chars": len(text)}
        _note(result, f"{what} cut at {max_chars:,} of {len(text):,} characters")
    return text[:max_chars]


def _note(result: _Outputs, message: str) -> None:
    result.metadata.setdefault("warnings", []).append(message)


def _decided_by_head(kind: str, head: bytes) -> bool:
    """Whether the first bytes settle the file: unsupported content, or a DWG of a
    version ezdwg does not read (R12 and older)."""
    if kind == "dwg":
        from ingest.extract.dwg import READABLE, dwg_version

        return dwg_version(head) not in READABLE
    return kind in _HEAD_IS_ENOUGH


def _dispatch(kind: str, body: bytes | Path, max_pages: int) -> Extraction:
    if kind == "pdf":
        from ingest.extract.pdf import extract_pdf

        return extract_pdf(body, max_pages=max_pages)
    if kind == "dwg":
        from ingest.extract.dwg import extract_dwg

        return extract_dwg(body)  # an older version is refused from its first bytes
    data = body if isinstance(body, bytes) else body.read_bytes()
    if kind == "dxf":
        from ingest.extract.dxf import extract_dxf

        return extract_dxf(data)
    if kind == "docx":
        from ingest.extract.docx import extract_docx

        return extract_docx(data)
    if kind == "html":
        from ingest.extract.html import extract_html

        return extract_html(data)
    if kind in TEXT_KINDS:
        from ingest.extract.text import extract_text_file

        return extract_text_file(data, kind)
    raise UnsupportedFormatError(f"unrecognised content (starts with {data[:16]!r})")


def _empty(name: str) -> Extraction:
    return _not_read(detect_kind(b"", name), "empty", "zero-byte file")


def _not_read(kind: str, status: DocumentStatus, error: str) -> Extraction:
    """The outcome of a document no parser read to the end: ``empty`` and ``unsupported``
    are settled by detection, the others by the parser of ``kind``."""
    extractor = "detect" if status in ("empty", "unsupported") else _lib(kind)
    return Extraction(kind=kind, status=status, error=error, extractor=extractor)


def _lib(kind: str) -> str:
    return {
        "pdf": "pypdfium2",
        "dxf": "ezdxf",
        "dwg": "ezdwg",
        "docx": "python-docx",
        "html": "selectolax",
    }.get(kind, "text")


__all__ = [
    "EXTRACTOR_VERSION",
    "Extraction",
    "extract_by_head",
    "extract_document",
    "extract_stored",
    "settle_by_head",
]
