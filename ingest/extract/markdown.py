"""A markdown rendition of a document: headings, lists and tables kept as such.

* DOCX, from the paragraph styles: ``Title`` and ``Heading N`` become ``#`` headings,
  list styles (``List Bullet``, ``List Number``...) and numbered paragraphs (``w:numPr``)
  list items, nested by their level; a table is a markdown table (its first row the
  header row, a nested table's text flattened into its cell).
* HTML, from the tags: ``h1``-``h6``, ``ul``/``ol``/``li`` (nested), ``table`` (``th`` or
  the first row as header), ``pre`` as a fenced block, ``p``/``div``... as paragraphs.
* PDF: one ``<!-- page N -->`` marker per page, then the page's lines; a line set in a
  font at least 1.25 times the page's commonest size (and short) becomes a heading.
* Running text of every format (and OCR'd text) stays text (``literal``): its own lines
  that begin like a heading or a page marker are escaped with a backslash.
* Text files and drawings have no markup: no rendition (the ``markdown`` column is null).

Made in the worker with the text (``Extraction.structure["markdown"]``) and stored in
the ``markdown`` column of ``documents``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from ingest.extract.base import clean_text

_PAGE_MARKER = re.compile(r"^<!-- page (\d+) -->$", re.MULTILINE)
_CELL_BREAK = re.compile(r"\s*\n\s*")
_WHITESPACE = re.compile(r"\s+")
MAX_MARKDOWN = 64 * 1024 * 1024  # characters: a rendition past this is cut (the text is not)


def table(rows: list[list[str]]) -> str:
    """Rows of cell texts as a markdown table; the first row is the header row."""
    rows = [r for r in rows if r]
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    cells = [[_cell(c) for c in r] + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * width]
    lines += ["| " + " | ".join(r) + " |" for r in cells[1:]]
    return "\n".join(lines)


def _cell(text: str) -> str:
    return _CELL_BREAK.sub(" <br> ", text.strip()).replace("|", "\\|")


def literal(text: str) -> str:
    """Running text as markdown text: a line that would read as a heading or a page
    marker (``# ...``, ``<!-- ...``) is escaped, so a document's own text never becomes a
    heading of the rendition, nor a cut of its chunks, nor another page's marker."""
    return "\n".join(
        "\\" + line if line.lstrip().startswith(("#", "<!--")) else line
        for line in text.split("\n")
    )


def join_blocks(blocks: Iterable[str]) -> str:
    out = "\n\n".join(b for b in blocks if b and b.strip())
    return out[:MAX_MARKDOWN]


# ------------------------------------------------------------------------------ DOCX


def docx_markdown(body: Any, styles: dict[str, str]) -> str:
    """The body element of a python-docx document as markdown; ``styles`` maps style ids
    to style names (``Heading1`` -> ``Heading 1``)."""
    from docx.oxml.ns import qn

    blocks: list[str] = []
    list_run: list[str] = []

    def flush() -> None:
        if list_run:
            blocks.append("\n".join(list_run))
            list_run.clear()

    def walk(element: Any) -> None:
        for child in element.iterchildren():
            if child.tag == qn("w:p"):
                text = _docx_text(child).strip()
                if not text:
                    continue
                style = styles.get(_docx_style_id(child), _docx_style_id(child))
                level, numbered, is_list = _docx_list(child, style)
                heading = _docx_heading(style)
                if is_list and not heading:
                    marker = "1." if numbered else "-"
                    list_run.append("  " * level + f"{marker} {text}")
                    continue
                flush()
                blocks.append("#" * heading + " " + text if heading else literal(text))
            elif child.tag == qn("w:tbl"):
                flush()
                blocks.append(table(_docx_rows(child)))
            elif child.tag == qn("w:sdt"):
                content = child.find(qn("w:sdtContent"))
                if content is not None:
                    walk(content)

    walk(body)
    flush()
    return join_blocks(blocks)


def _docx_style_id(p: Any) -> str:
    from docx.oxml.ns import qn

    ppr = p.find(qn("w:pPr"))
    style = ppr.find(qn("w:pStyle")) if ppr is not None else None
    return style.get(qn("w:val"), "") if style is not None else ""


def _docx_heading(style: str) -> int:
    name = style.replace(" ", "").lower()
    if name == "title":
        return 1
    m = re.fullmatch(r"heading([1-6])", name)
    return int(m.group(1)) if m else 0


def _docx_list(p: Any, style: str) -> tuple[int, bool, bool]:
    """(level, numbered, is a list item) of a paragraph."""
    from docx.oxml.ns import qn

    name = style.replace(" ", "").lower()
    ppr = p.find(qn("w:pPr"))
    num = ppr.find(qn("w:numPr")) if ppr is not None else None
    level = 0
    if num is not None:
        ilvl = num.find(qn("w:ilvl"))
        if ilvl is not None:
            try:
                level = int(ilvl.get(qn("w:val"), "0"))
            except ValueError:
                level = 0
    m = re.fullmatch(r"list(bullet|number)(\d?)", name)
    if m:
        return (int(m.group(2)) - 1 if m.group(2) else level), m.group(1) == "number", True
    if num is not None or name.startswith("listparagraph"):
        return level, False, True
    return 0, False, False


def _docx_text(p: Any) -> str:
    return clean_text(paragraph_text(p, textboxes=True))


def paragraph_text(p: Any, *, textboxes: bool = False) -> str:
    """Runs of the paragraph, tabs and breaks kept; the runs of text boxes anchored in it
    only with ``textboxes`` (the text has them as lines of their own)."""
    from docx.oxml.ns import qn

    parts: list[str] = []
    for node in p.iter(qn("w:t"), qn("w:tab"), qn("w:br")):
        if node.tag == qn("w:tab"):
            parts.append("\t")
        elif node.tag == qn("w:br"):
            parts.append("\n")
        elif textboxes or not _inside_textbox(node, p):
            parts.append(node.text or "")
    return "".join(parts)


def _inside_textbox(node: Any, stop: Any) -> bool:
    parent = node.getparent()
    while parent is not None and parent is not stop:
        if parent.tag.endswith("}txbxContent"):
            return True
        parent = parent.getparent()
    return False


def _docx_rows(tbl: Any) -> list[list[str]]:
    from docx.oxml.ns import qn

    rows = []
    for tr in tbl.iterchildren(qn("w:tr")):
        cells = []
        for tc in tr.iterchildren(qn("w:tc")):
            texts = [_docx_text(p) for p in tc.iter(qn("w:p"))]
            cells.append("\n".join(t for t in texts if t))
        rows.append(cells)
    return rows


# ------------------------------------------------------------------------------ HTML

_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
_BLOCK_TAGS = {
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside",
    "blockquote", "figure", "figcaption", "address", "details", "summary", "form",
    "dl", "dt", "dd", "body", "html", "center", "caption",
}  # fmt: skip


def html_markdown(root: Any) -> str:
    """A selectolax node (the body, invisible elements already stripped) as markdown."""
    blocks: list[str] = []
    inline: list[str] = []

    def flush() -> None:
        text = clean_text("".join(inline))
        inline.clear()
        if text:
            blocks.append(literal(text))

    def walk(node: Any) -> None:
        child = node.child
        while child is not None:
            tag = child.tag
            if tag == "-text":
                # Whitespace in HTML's running text is one space (line breaks are <br>).
                inline.append(_WHITESPACE.sub(" ", child.text_content or ""))
            elif tag in _HEADINGS:
                flush()
                text = clean_text(child.text(deep=True, separator="")).replace("\n", " ")
                if text:
                    blocks.append("#" * _HEADINGS[tag] + " " + text)
            elif tag in ("ul", "ol"):
                flush()
                items = _html_list(child, 0)
                if items:
                    blocks.append("\n".join(items))
            elif tag == "table":
                flush()
                blocks.append(table(_html_rows(child)))
            elif tag == "pre":
                flush()
                blocks.append("```\n" + (child.text(deep=True) or "").strip("\n") + "\n```")
            elif tag == "br":
                inline.append("\n")
            elif tag == "hr":
                flush()
            elif tag in _BLOCK_TAGS or tag == "li":
                flush()
                walk(child)
                flush()
            else:
                walk(child)
            child = child.next

    walk(root)
    flush()
    return join_blocks(blocks)


def _html_list(node: Any, level: int) -> list[str]:
    numbered = node.tag == "ol"
    out: list[str] = []
    child = node.child
    while child is not None:
        if child.tag == "li":
            own: list[str] = []
            nested: list[str] = []
            part = child.child
            while part is not None:
                if part.tag in ("ul", "ol"):
                    nested += _html_list(part, level + 1)
                else:
                    own.append(part.text(deep=True, separator="") or "")
                part = part.next
            text = clean_text("".join(own)).replace("\n", " ")
            if text:
                out.append("  " * level + ("1. " if numbered else "- ") + text)
            out += nested
        elif child.tag in ("ul", "ol"):
            out += _html_list(child, level + 1)
        child = child.next
    return out


def _html_rows(tbl: Any) -> list[list[str]]:
    rows = []
    for tr in tbl.css("tr"):
        # Rows of this table only, not of a table nested in a cell.
        parent = tr.parent
        while parent is not None and parent.tag != "table":
            parent = parent.parent
        if parent is None or parent.mem_id != tbl.mem_id:
            continue
        cells = []
        cell = tr.child
        while cell is not None:
            if cell.tag in ("td", "th"):
                cells.append(clean_text(cell.text(deep=True, separator=" ") or ""))
            cell = cell.next
        rows.append(cells)
    return rows


# ------------------------------------------------------------------------------ PDF


def pdfium_lines(textpage: Any) -> list[tuple[str, float]]:
    """The lines of a pypdfium2 text page, each with the font size of its first character."""
    import pypdfium2.raw as raw

    text = textpage.get_text_range()
    out: list[tuple[str, float]] = []
    index = 0
    for line in text.replace("\r\n", "\n").split("\n"):
        size = raw.FPDFText_GetFontSize(textpage.raw, index) if line.strip() else 0.0
        out.append((line, float(size)))
        index += len(line) + 2  # the \r\n pdfium puts between lines
    return out


def pdf_markdown(pages: list[list[tuple[str, float]]]) -> str:
    """Pages of (line, font size) as markdown: a page marker, then the lines; a short line
    in a font at least 1.25 times the page's commonest size is a ``##`` heading."""
    blocks: list[str] = []
    for number, lines in enumerate(pages, start=1):
        blocks.append(f"<!-- page {number} -->")
        sizes = [round(s, 1) for line, s in lines if s > 0 and line.strip()]
        body = max(set(sizes), key=sizes.count) if sizes else 0.0
        paragraph: list[str] = []
        for line, size in lines:
            text = line.strip()
            if not text:
                if paragraph:
                    blocks.append("\n".join(paragraph))
                    paragraph = []
                continue
            if body and size >= 1.25 * body and len(text) <= 120:
                if paragraph:
                    blocks.append("\n".join(paragraph))
                    paragraph = []
                blocks.append("## " + text)
            else:
                paragraph.append(literal(text))
        if paragraph:
            blocks.append("\n".join(paragraph))
    return join_blocks(blocks)


def add_page_text(markdown: str, number: int, text: str) -> str:
    """``markdown`` (``pdf_markdown``'s) with ``text`` as paragraphs of page ``number``,
    after the page's own content (OCR'd text of a page that had none).

    The markers are taken in order (page 1, 2, ...), so a marker-like line in a page's
    text is not taken for a later page's marker; without the page's marker (a rendition
    cut short), the markdown is returned as it is."""
    if not text.strip():
        return markdown
    expected, start = 1, -1
    for m in _PAGE_MARKER.finditer(markdown):
        if int(m.group(1)) != expected:
            continue
        if expected == number:
            start = m.end()
        elif expected == number + 1:
            return markdown[: m.start()] + text + "\n\n" + markdown[m.start() :]
        expected += 1
    if start < 0:
        return markdown
    return markdown.rstrip("\n") + "\n\n" + text
