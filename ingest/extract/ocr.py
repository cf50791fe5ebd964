"""Optional OCR of image-only PDF pages: pypdfium2 renders, tesseract reads.

Off by default (``Settings.ocr.enabled``): tesseract costs 10-30 s per A4
page at 300 dpi on 2 cores, so OCR jobs run on their own small pool with a
bounded queue (``ocr_queue_size``), a page cap per document
(``ocr_max_pages``) and their own time limit; text extraction never waits
behind them.

Enable it with the Debian packages ``tesseract-ocr`` and ``tesseract-ocr-kor``,
the ``ocr`` extra (pytesseract), and ``INGEST_OCR_ENABLED=true``. When any of
them is missing, ``ocr_unavailable`` says which, and documents keep their
``needs_ocr`` page count.
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path


@functools.cache
def ocr_unavailable(languages: str = "kor+eng") -> str | None:
    """None when OCR can run; otherwise what is missing."""
    try:
        import pytesseract
    except ImportError:
        return "pytesseract is not installed (install the 'ocr' extra)"
    if shutil.which("tesseract") is None:
        return "the tesseract program is missing (apt-get install tesseract-ocr tesseract-ocr-kor)"
    try:
        have = set(pytesseract.get_languages(config=""))
    except Exception as exc:  # pytesseract raises its own errors for a broken install
        return f"tesseract does not run: {exc}"
    missing = [lang for lang in languages.split("+") if lang and lang not in have]
    if missing:
        return f"tesseract languages missing: {', '.join(missing)} (tesseract-ocr-LANG packages)"
    return None


def ocr_pdf_pages(
    path: str, pages: list[int], *, dpi: int = 300, languages: str = "kor+eng", max_pages: int = 10
) -> list[tuple[int, str]]:
    """OCR the given pages (0-based, at most ``max_pages``); returns ``(page, text)`` of
    each page done, so the text lands on its own page (``ingest.extract.batch.run_ocr``).

    Runs in an OCR worker process (``ingest.extract.pool``), one document per job.
    """
    import pypdfium2 as pdfium
    import pytesseract

    done: list[tuple[int, str]] = []
    pdf = pdfium.PdfDocument(Path(path))
    try:
        for index in pages[:max_pages]:
            page = pdf[index]
            try:
                image = page.render(scale=dpi / 72).to_pil()
            finally:
                page.close()
            done.append((index, pytesseract.image_to_string(image, lang=languages)))
    finally:
        pdf.close()
    return done
