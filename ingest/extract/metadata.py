"""The same metadata fields for every format, from the format's own fields.

Every ``ok`` extraction gets, where the format has them: ``title``, ``author``,
``created`` and ``modified`` (ISO 8601), ``producer`` and ``application`` (the program
that wrote the file), ``page_count``, and ``language`` (detected from the text, see
``detect_language``); a text file (and an HTML page) also has ``encoding`` and
``encoding_confidence``. Where each comes from:

========== ======================== ============================ ==========================
field      PDF (Info dictionary)    DOCX (core / app properties)  HTML / DXF
========== ======================== ============================ ==========================
title      Title                    dc:title                      ``<title>`` / ``$TITLE``
author     Author                   dc:creator                    ``<meta name=author>``
created    CreationDate             dcterms:created               ``$TDCREATE`` (DXF)
modified   ModDate                  dcterms:modified              ``$TDUPDATE`` (DXF)
producer   Producer                 --                            --
application Creator                 Application (app.xml)         ``<meta name=generator>``
========== ======================== ============================ ==========================
"""

from __future__ import annotations

import re
from collections import Counter
from operator import itemgetter
from typing import Any

from ingest.extract.base import Extraction

_PDF_DATE = re.compile(
    r"^(?:D:)?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*(Z|[+-]\d{2}'?\d{2}'?)?"
)
# Scripts by code point range, for language detection.
_SCRIPTS = (
    ("hangul", ((0xAC00, 0xD7A3), (0x1100, 0x11FF), (0x3130, 0x318F))),
    ("kana", ((0x3040, 0x30FF), (0x31F0, 0x31FF))),
    ("han", ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF))),
    ("cyrillic", ((0x0400, 0x04FF),)),
    ("greek", ((0x0370, 0x03FF),)),
    ("arabic", ((0x0600, 0x06FF),)),
    ("hebrew", ((0x0590, 0x05FF),)),
    ("thai", ((0x0E00, 0x0E7F),)),
)
_SCRIPT_LANGUAGE = {
    "hangul": "ko",
    "cyrillic": "ru",
    "greek": "el",
    "arabic": "ar",
    "hebrew": "he",
    "thai": "th",
}
# The commonest short words of the Latin-script languages told apart.
_STOPWORD_LINES = {
    "en": "the and of to in is that for it with as was on are be by this from or at",
    "de": "der die und das ist nicht ein eine zu den mit von sich des auf für im dem",
    "fr": "le la les et des est un une du que pour dans qui pas en sur au avec par",
    "es": "el la los las de que y en un una es por con para del se al lo como",
    "it": "il di che la e un una per non sono del della è le con si gli da",
    "pt": "o a os as de que e do da em um uma para com não por se dos das",
    "nl": "de het een en van is dat niet op te in met zijn voor er die aan",
    "la": "et ut in est sed non ad cum quod qui sit at quae vel ac nec sunt ea",
}
_STOPWORDS = {lang: set(line.split()) for lang, line in _STOPWORD_LINES.items()}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
SAMPLE = 20_000  # characters of the text the language is told from


def detect_language(text: str) -> str | None:
    """An ISO 639-1 code, or None for text too short or mixed to tell.

    By script first (Hangul: ko; kana: ja; Han without kana: zh; Cyrillic, Greek,
    Arabic, Hebrew, Thai), then, for Latin script, by the commonest short words of
    English, German, French, Spanish, Italian, Portuguese, Dutch and Latin (placeholder
    text is Latin).
    """
    sample = text[:SAMPLE]
    counts: Counter[str] = Counter()
    letters = 0
    # Each distinct character once, weighted by how often it occurs (counted in C): a
    # text has a few hundred distinct characters (a few thousand in CJK) of 20,000.
    for ch, n in Counter(sample).items():
        if not ch.isalpha():
            continue
        letters += n
        o = ord(ch)
        if o < 0x250:
            counts["latin"] += n
            continue
        for name, ranges in _SCRIPTS:
            if any(lo <= o <= hi for lo, hi in ranges):
                counts[name] += n
                break
    if letters < 8:
        return None
    cjk = counts["hangul"] + counts["kana"] + counts["han"]
    if cjk >= 0.2 * letters:
        if counts["hangul"] >= max(counts["kana"], 1) and counts["hangul"] >= 0.3 * cjk:
            return "ko"
        if counts["kana"] >= 0.05 * cjk:
            return "ja"
        return "zh"
    script, n = max(
        ((s, c) for s, c in counts.items() if s != "latin"), default=("", 0), key=itemgetter(1)
    )
    if n > counts["latin"]:
        return _SCRIPT_LANGUAGE.get(script)
    words = [w.lower() for w in _WORD.findall(sample)]
    if len(words) < 5:
        return None
    freq = Counter(words)
    scores = {lang: sum(freq[w] for w in stop) for lang, stop in _STOPWORDS.items()}
    lang, best = max(scores.items(), key=itemgetter(1))
    return lang if best >= 2 and best >= 0.02 * len(words) else None


def pdf_date(value: Any) -> str | None:
    """``D:20240131093000+09'00'`` -> ``2024-01-31T09:30:00+09:00``; None when unparsable."""
    m = _PDF_DATE.match(str(value).strip())
    if not m:
        return None
    year, month, day, hour, minute, second, zone = m.groups()
    out = f"{year}-{month or '01'}-{day or '01'}T{hour or '00'}:{minute or '00'}:{second or '00'}"
    if zone == "Z":
        out += "+00:00"
    elif zone:
        digits = zone.replace("'", "")
        out += f"{digits[:3]}:{digits[3:5] or '00'}"
    return out


def complete(x: Extraction) -> Extraction:
    """Add the common fields to an ``ok`` extraction's metadata (in place)."""
    if x.status != "ok":
        return x
    meta = x.metadata
    if x.kind == "pdf":
        for name in ("created", "modified"):
            if name in meta:
                parsed = pdf_date(meta[name])
                if parsed:
                    meta[name] = parsed
        if meta.get("creator") and "application" not in meta:
            meta["application"] = meta["creator"]
    meta["page_count"] = x.pages
    language = detect_language(x.text)
    if language:
        meta["language"] = language
    return x
