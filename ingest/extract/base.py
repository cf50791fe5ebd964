"""What every extractor returns, the errors it may raise, and text clean-up."""

from __future__ import annotations

import functools
import re
import sys
import unicodedata
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ingest.errors import ItemError

if TYPE_CHECKING:  # a name for the checker only: the workers never import pyarrow's records
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


# Unicode's stream-safe format (UAX #15): at most 30 non-starters (combining marks) in a
# row. Normalisation sorts each run of marks, a cost that grows with the square of its
# length: one base letter and 40,000 marks took 2.2 s here, a 1 MB file of them minutes.
# A longer run gets a COMBINING GRAPHEME JOINER (a starter) after every 30 marks, which
# makes NFC linear and keeps every character.
_MAX_NON_STARTERS = 30
_CGJ = "\u034f"


@functools.cache
def _long_mark_runs() -> re.Pattern[str]:
    """Runs of more than 30 characters of a non-zero combining class (built once, ~0.2 s)."""
    ranges: list[tuple[int, int]] = []
    for code in range(sys.maxunicode + 1):
        if unicodedata.combining(chr(code)):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1] = (ranges[-1][0], code)
            else:
                ranges.append((code, code))
    marks = "".join(
        re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}"
        for a, b in ranges
    )
    return re.compile(f"[{marks}]{{{_MAX_NON_STARTERS + 1},}}")


def _stream_safe(text: str) -> str:
    def split(run: re.Match[str]) -> str:
        marks = run.group()
        return _CGJ.join(
            marks[i : i + _MAX_NON_STARTERS] for i in range(0, len(marks), _MAX_NON_STARTERS)
        )

    return _long_mark_runs().sub(split, text)


def clean_text(text: str) -> str:
    """Searchable text: NFC (Hangul from some PDFs and Macs arrives decomposed), no control
    characters, runs of spaces collapsed, lines trimmed, at most one blank line in a row.
    Runs of more than 30 combining marks are split first (``_stream_safe``), so a file of
    marks costs time in proportion to its length."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not unicodedata.is_normalized("NFC", text):  # a linear check: most text already is
        text = unicodedata.normalize("NFC", _stream_safe(text))
    text = _CONTROL.sub(" ", text)
    lines = [_SPACES.sub(" ", line).strip() for line in text.split("\n")]
    return _BLANKS.sub("\n\n", "\n".join(lines)).strip()
