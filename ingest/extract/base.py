"""What every extractor returns, the errors it may raise, and text clean-up."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any

from ingest.errors import ItemError
from ingest.records import DocumentStatus


class ExtractError(ItemError):
    """A document could not be read; it becomes a ``failed`` row with this message."""


class EncryptedDocumentError(ExtractError):
    """The document needs a password to be read (status ``encrypted``)."""


class UnsupportedFormatError(ExtractError):
    """No extractor reads this format (status ``unsupported``)."""


@dataclass(slots=True)
class Extraction:
    """The result of parsing one document, before it is tied to a bucket and key."""

    kind: str
    status: DocumentStatus = "ok"
    text: str = ""
    pages: int = 0
    needs_ocr: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    extractor: str = ""
    error: str | None = None
    # Structured outputs (ingest.extract.structure): "pages" (text of each page), "drawing"
    # and "attributes" (DXF), "markdown"; plain lists and strings, cheap to send back.
    structure: dict[str, Any] = field(default_factory=dict)

    def warn(self, message: str) -> None:
        """Keep a note about a document that was read anyway (a repaired file...)."""
        self.metadata.setdefault("warnings", []).append(message)


# Control characters other than tab and newline; also lone surrogates from broken decoders.
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")
_SPACES = re.compile(r"[ \t\u00a0\u2000-\u200b\u3000]+")
_BLANKS = re.compile(r"\n{3,}")


def clean_text(text: str) -> str:
    """Searchable text: NFC (Hangul from some PDFs and Macs arrives decomposed), no control
    characters, runs of spaces collapsed, lines trimmed, at most one blank line in a row."""
    text = unicodedata.normalize("NFC", text.replace("\r\n", "\n").replace("\r", "\n"))
    text = _CONTROL.sub(" ", text)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()


def join_lines(parts: list[str]) -> str:
    """Join non-empty fragments, one per line."""
    return "\n".join(p for p in parts if p and p.strip())
