"""Plain text, CSV, Markdown, JSON and XML: decode the bytes, clean the text.

Decoding order: a BOM, then strict UTF-8, then charset-normalizer (which
tells CP949, UTF-16 without a BOM, Big5 and the cp125x family apart).
"""

from __future__ import annotations

import codecs

from charset_normalizer import from_bytes

from ingest.extract.base import Extraction, clean_text

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def bom_encoding(data: bytes) -> tuple[str, int] | None:
    """(encoding, BOM length) when ``data`` starts with a byte-order mark."""
    for bom, name in _BOMS:
        if data.startswith(bom):
            return name, len(bom)
    return None


def detect_encoding(data: bytes) -> str | None:
    """charset-normalizer's best guess, or None when nothing decodes."""
    best = from_bytes(data[: 256 * 1024]).best()
    return best.encoding if best else None


def decode_bom(data: bytes) -> tuple[str, str] | None:
    """Text and encoding when ``data`` starts with a byte-order mark, else None."""
    bom = bom_encoding(data)
    if bom:
        name, skip = bom
        return data[skip:].decode(name, errors="replace"), name
    return None


def decode_utf8_or_detected(data: bytes) -> tuple[str, str] | None:
    """Text and encoding from strict UTF-8, else from charset-normalizer's guess when
    that decodes cleanly; None when neither does."""
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    guess = detect_encoding(data)
    if guess:
        try:
            return data.decode(guess), guess
        except (UnicodeDecodeError, LookupError):
            pass
    return None


def decode_bytes(data: bytes) -> tuple[str, str]:
    """Text and the encoding it was read with: BOM, UTF-8, then detection."""
    decoded = decode_bom(data) or decode_utf8_or_detected(data)
    if decoded:
        return decoded
    return data.decode("utf-8", errors="replace"), "utf-8 (with replacements)"


def encoding_confidence(data: bytes, encoding: str) -> float | None:
    """How sure the decoding is, from 0 to 1: 1.0 for a BOM or strict UTF-8 of non-ASCII
    bytes; for an encoding charset-normalizer chose, 1 minus its "chaos" (the share of
    the text that looks like mojibake); 0.0 for a decoding with replacements."""
    if "replacements" in encoding:
        return 0.0
    if bom_encoding(data) or encoding == "utf-8":
        return 1.0
    best = from_bytes(data[: 256 * 1024]).best()
    if best is None:
        return None
    return round(max(0.0, 1.0 - float(best.chaos)), 3)


def extract_text_file(data: bytes, kind: str = "txt") -> Extraction:
    text, encoding = decode_bytes(data)
    metadata: dict[str, object] = {"encoding": encoding}
    confidence = encoding_confidence(data, encoding)
    if confidence is not None:
        metadata["encoding_confidence"] = confidence
    return Extraction(
        kind=kind, text=clean_text(text), pages=1, metadata=metadata, extractor="text"
    )
