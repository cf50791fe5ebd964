"""DOCX: python-docx for the document model, the package XML for the rest.

python-docx gives paragraphs, tables (nested) and every header and footer in
reading order. It misses text boxes, footnotes, endnotes and comments, and
refuses strict OOXML and some damaged packages; for those the text runs
(``w:t`` inside ``w:p``, any namespace) are read straight from the XML parts.
"""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from ingest.extract.base import ExtractError, Extraction, clean_text
from ingest.extract.markdown import paragraph_text

_PARTS = re.compile(r"^word/(document|header\d*|footer\d*|footnotes|endnotes|comments)\.xml$")
_MAX_XML = 256 * 1024 * 1024  # refuse zip bombs: uncompressed size of one part


def extract_docx(source: bytes | Path) -> Extraction:
    data = source if isinstance(source, bytes) else source.read_bytes()
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise ExtractError(f"not a readable DOCX package: {exc}") from exc
    with archive:
        xml_paragraphs = _xml_paragraphs(archive)
    try:
        paragraphs, seen, metadata = _with_python_docx(data)
        extractor = "python-docx"
    except Exception as exc:  # python-docx refuses strict OOXML and odd packages
        if not xml_paragraphs:
            raise ExtractError(
                f"python-docx: {type(exc).__name__}: {exc}; no text in the XML"
            ) from exc
        result = Extraction(
            kind="docx",
            text=clean_text("\n".join(xml_paragraphs)),
            pages=1,
            extractor="docx-xml",
        )
        result.warn(f"python-docx refused it ({type(exc).__name__}: {exc}); text from the XML")
        return result
    extra = [p for p in xml_paragraphs if p.strip() and p.strip() not in seen]
    if extra:  # text boxes, footnotes, comments ... that python-docx does not model
        extractor = "python-docx+xml"
        metadata["xml_only_paragraphs"] = len(extra)
    text = clean_text("\n".join(paragraphs + extra))
    markdown = metadata.pop("_markdown", None)
    return Extraction(
        kind="docx",
        text=text,
        pages=1,
        metadata=metadata,
        extractor=extractor,
        structure={"markdown": markdown} if markdown else {},
    )


def _with_python_docx(data: bytes) -> tuple[list[str], set[str], dict[str, Any]]:
    """Lines in reading order, the set of every paragraph's text, and core properties."""
    import docx
    from docx.document import Document as DocumentObject

    document: DocumentObject = docx.Document(io.BytesIO(data))
    out: list[str] = []
    seen: set[str] = set()
    seen_parts: set[int] = set()
    for section in document.sections:
        for header in (section.first_page_header, section.even_page_header, section.header):
            _add_story(header, out, seen, seen_parts)
    _block_text(document.element.body, out, seen)
    for section in document.sections:
        for footer in (section.first_page_footer, section.even_page_footer, section.footer):
            _add_story(footer, out, seen, seen_parts)
    props = document.core_properties
    metadata: dict[str, Any] = {}
    for name in ("title", "author", "subject", "keywords", "last_modified_by"):
        value = getattr(props, name, None)
        if value:
            metadata[name] = value
    if props.created:
        metadata["created"] = props.created.isoformat()
    if props.modified:
        metadata["modified"] = props.modified.isoformat()
    application = _application(document)
    if application:
        metadata["application"] = application
    metadata["_markdown"] = _markdown(document)
    return out, seen, metadata


def _markdown(document: Any) -> str | None:
    """The body as markdown (``ingest.extract.markdown``); None if it cannot be made."""
    from ingest.extract.markdown import docx_markdown

    try:
        styles = {s.style_id: s.name for s in document.styles if s.style_id and s.name}
        return docx_markdown(document.element.body, styles)
    except (AttributeError, ValueError, TypeError, KeyError):
        return None


def _application(document: Any) -> str | None:
    """``Application`` (and ``AppVersion``) of ``docProps/app.xml``, the extended properties."""
    for rel in document.part.package.rels.values():
        if rel.reltype.endswith("/extended-properties") and not rel.is_external:
            try:
                root = ET.fromstring(rel.target_part.blob)
            except (ET.ParseError, AttributeError):
                return None
            found = {_local(c.tag): (c.text or "").strip() for c in root}
            name = found.get("Application", "")
            version = found.get("AppVersion", "")
            return f"{name} {version}".strip() or None
    return None


def _add_story(hf: Any, out: list[str], seen: set[str], seen_parts: set[int]) -> None:
    """A header or footer, once per part (sections share them when linked)."""
    if hf is None or hf.is_linked_to_previous:
        return
    part = id(hf.part)
    if part in seen_parts:
        return
    seen_parts.add(part)
    _block_text(hf._element, out, seen)


def _block_text(element: Any, out: list[str], seen: set[str]) -> None:
    """Paragraphs and tables in document order; table cells recursively (nested tables)."""
    from docx.oxml.ns import qn

    for child in element.iterchildren():
        if child.tag == qn("w:p"):
            text = paragraph_text(child)
            seen.add(text.strip())
            out.append(text)
        elif child.tag == qn("w:tbl"):
            for row in child.iterchildren(qn("w:tr")):
                cells = []
                for cell in row.iterchildren(qn("w:tc")):
                    inner: list[str] = []
                    _block_text(cell, inner, seen)
                    cells.append(" ".join(t for t in inner if t))
                out.append("\t".join(cells))
        elif child.tag == qn("w:sdt"):  # content controls wrap paragraphs and tables
            content = child.find(qn("w:sdtContent"))
            if content is not None:
                _block_text(content, out, seen)


def _xml_paragraphs(archive: zipfile.ZipFile) -> list[str]:
    """Text of every ``w:p`` in the text-bearing parts, namespace-agnostic (strict OOXML)."""
    out: list[str] = []
    names = sorted(n for n in archive.namelist() if _PARTS.match(n))
    names.sort(key=lambda n: (not n.startswith("word/header"), n != "word/document.xml", n))
    for name in names:
        info = archive.getinfo(name)
        if info.file_size > _MAX_XML:
            continue
        try:
            root = ET.fromstring(archive.read(name))
        except (ET.ParseError, zipfile.BadZipFile, OSError):
            continue
        _walk_xml(root, out)
    return out


def _walk_xml(element: Any, out: list[str]) -> None:
    for child in element:
        if _local(child.tag) == "p":
            texts: list[str] = []
            _collect_runs(child, texts, out)
            out.append("".join(texts))
        else:
            _walk_xml(child, out)


def _collect_runs(element: Any, texts: list[str], out: list[str]) -> None:
    """Runs of one paragraph; a paragraph nested in it (a text box) becomes its own line."""
    for child in element:
        name = _local(child.tag)
        if name == "t":
            texts.append(child.text or "")
        elif name == "tab":
            texts.append("\t")
        elif name == "p":
            inner: list[str] = []
            _collect_runs(child, inner, out)
            out.append("".join(inner))
        else:
            _collect_runs(child, texts, out)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]
