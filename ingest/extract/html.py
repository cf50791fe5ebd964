"""HTML: visible text only, decoded by us before parsing.

The fast parsers ignore the declared charset of raw bytes (an EUC-KR page
came back as replacement characters), so the bytes are decoded here first:
BOM, then ``<meta charset>`` / ``http-equiv`` in the first bytes, then UTF-8,
then detection; the parser only ever sees ``str``.
"""

from __future__ import annotations

import codecs
import re

from selectolax.lexbor import LexborHTMLParser

from ingest.extract.base import Extraction, clean_text
from ingest.extract.text import decode_bom, decode_utf8_or_detected, encoding_confidence

_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.I)
_XML_DECL = re.compile(rb"""^\s*<\?xml[^>]+encoding\s*=\s*["']([a-zA-Z0-9_.:-]+)""", re.I)
# Elements that end a line: text is joined without separators (so inline tags never split a
# word) and a newline is put after each of these.
_BLOCKS = (
    "p,div,br,li,tr,td,th,h1,h2,h3,h4,h5,h6,table,ul,ol,section,article,header,footer,nav,"
    "aside,blockquote,pre,dt,dd,figcaption,option,form,hr,main,address,details,summary,caption"
)
_INVISIBLE = ["script", "style", "noscript", "template", "head", "svg", "iframe", "object"]
# Aliases browsers apply (WHATWG): a page that says euc-kr is really CP949, and so on.
_WHATWG = {
    "euc-kr": "cp949",
    "ks_c_5601-1987": "cp949",
    "iso-8859-1": "cp1252",
    "latin1": "cp1252",
    "ascii": "cp1252",
    "us-ascii": "cp1252",
    "gb2312": "gb18030",
    "gbk": "gb18030",
    "big5": "big5hkscs",
    "shift_jis": "cp932",
    "x-sjis": "cp932",
    "tis-620": "cp874",
    "iso-8859-9": "cp1254",
    "utf8": "utf-8",
}


def declared_charset(data: bytes) -> str | None:
    """The charset a page declares in its first 4 KB, if Python knows it."""
    head = data[:4096]
    m = _META_CHARSET.search(head) or _XML_DECL.search(head)
    if not m:
        return None
    name = m.group(1).decode("ascii", "ignore").lower()
    name = _WHATWG.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_html(data: bytes) -> tuple[str, str]:
    """Text of an HTML page and how it was decoded."""
    by_bom = decode_bom(data)
    if by_bom:
        return by_bom
    declared = declared_charset(data)
    if declared and not declared.startswith("utf-16"):  # a UTF-16 page without BOM lies
        try:
            return data.decode(declared), declared
        except UnicodeDecodeError:
            pass  # the declaration is wrong; fall through to what the bytes say
    decoded = decode_utf8_or_detected(data)
    if decoded:
        return decoded
    return data.decode(
        declared or "utf-8", errors="replace"
    ), f"{declared or 'utf-8'} (with replacements)"


def extract_html(data: bytes) -> Extraction:
    markup, encoding = decode_html(data)
    tree = LexborHTMLParser(markup)
    title_node = tree.css_first("title")
    title = title_node.text(strip=True) if title_node else ""
    metadata: dict[str, object] = {"encoding": encoding}
    if title:
        metadata["title"] = title
    # Read from <head> before the invisible elements (<head> among them) are stripped.
    for name, field in (
        ("author", "author"),
        ("generator", "application"),
        ("description", "description"),
    ):
        meta = tree.css_first(f'meta[name="{name}" i]')
        content = meta.attributes.get("content") if meta else None
        if content and content.strip():
            metadata[field] = content.strip()
    tree.strip_tags(_INVISIBLE)
    root = tree.body or tree.root
    markdown = _markdown(root)
    for node in tree.css(_BLOCKS):
        node.insert_after("\n")
    text = root.text(separator="") if root else ""
    confidence = encoding_confidence(data, encoding)
    if confidence is not None:
        metadata["encoding_confidence"] = confidence
    lang = tree.css_first("html")
    if lang and lang.attributes.get("lang"):
        metadata["lang"] = lang.attributes["lang"]
    body = clean_text(text)
    if title and title not in body[: len(title) + 200]:
        body = clean_text(title + "\n" + body)
    return Extraction(
        kind="html",
        text=body,
        pages=1,
        metadata=metadata,
        extractor="selectolax",
        structure={"markdown": markdown} if markdown else {},
    )


def _markdown(root: object) -> str | None:
    """The page as markdown (``ingest.extract.markdown``), read before the line breaks the
    text needs are inserted; None if it cannot be made."""
    from ingest.extract.markdown import html_markdown

    if root is None:
        return None
    try:
        return html_markdown(root)
    except (AttributeError, ValueError, TypeError, RecursionError):
        return None
