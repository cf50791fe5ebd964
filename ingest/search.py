"""Ranked full-text search over the ``documents`` text, Korean included, offline.

Engine: SQLite FTS5 from the Python standard library (BM25 ranking), over a
side index ``search.sqlite`` on the machine that searches (in the data folder,
or in ``local_dir`` when the lake is on object storage), built from the lake's
``documents`` table wherever the lake lives; the index is never the source of
truth: it records which lake it was built from and which of the table's files it
has read, starts over when pointed at another lake, and can be deleted and
rebuilt at any time. Why not
DuckDB's ``fts`` extension: the Python wheel does not build it in and the
machine cannot download it at run time; the registry package that ships it
lags the installed DuckDB (1.5.5 against 1.5.6), and its
tokenizer keeps only ``[a-z]`` by default, so Hangul would need our own
tokenizing anyway. Measured on 100,000 documents: see
``benchmarks/extract.md``.

Korean (and Chinese, Japanese) have no spaces between the pieces a person
searches for (``도면을`` is ``도면`` plus a particle), so runs of CJK
characters are indexed as overlapping character bigrams, as Lucene's
CJKAnalyzer does: ``평면도`` becomes ``평면 면도``, and a query for
``도면`` finds ``도면을``. Other words are indexed as words (case and
diacritics folded by FTS5's ``unicode61`` tokenizer).

Documents of objects deleted from the bucket are marked ``deleted`` in
``documents`` (with no text) by the run that sees them gone, and leave the index
with that row; search never returns them.

The index is refreshed incrementally before each search: the files of the
table's current Delta version that it has not seen are read (files are never
changed in place; a MERGE writes new ones), and for each (bucket, key) only
the latest row is kept.
"""

from __future__ import annotations

import re
import sqlite3
import unicodedata
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from ingest import storage
from ingest.storage.location import DataDir

_CJK = "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
_TOKEN = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_CJK_CHAR = re.compile(rf"[{_CJK}]")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS docs (
    id INTEGER PRIMARY KEY,
    bucket TEXT NOT NULL, key TEXT NOT NULL, etag TEXT, kind TEXT, status TEXT,
    extracted_at TEXT, text TEXT,
    UNIQUE (bucket, key)
);
CREATE INDEX IF NOT EXISTS docs_kind ON docs (kind);
CREATE VIRTUAL TABLE IF NOT EXISTS doc_fts USING fts5(
    body, content='', tokenize='unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS parts (path TEXT PRIMARY KEY, mtime_ns INTEGER);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT);
"""


@dataclass(slots=True)
class Hit:
    key: str
    kind: str
    score: float
    snippet: str
    bucket: str = ""
    # Where in the document: the first chunk (document_chunks) holding a query word.
    page: int | None = None
    heading: str = ""
    chunk_id: str = ""


def index_terms(text: str) -> list[str]:
    """Tokens as indexed: words, and character bigrams of CJK runs."""
    out: list[str] = []
    for cjk, word in _TOKEN.findall(unicodedata.normalize("NFKC", text).lower()):
        if word:
            out.append(word)
        elif len(cjk) == 1:
            out.append(cjk)
        else:
            out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
    return out


def fts_query(words: str) -> str:
    """An FTS5 MATCH expression: every query word must match, each as a phrase of its
    tokens (``V-101`` is ``"v 101"``, ``평면도`` is ``"평면 면도"``)."""
    clauses: list[str] = []
    for word in words.split():
        terms = index_terms(word)
        if len(terms) == 1 and len(terms[0]) == 1 and _CJK_CHAR.fullmatch(terms[0]):
            clauses.append(f'"{terms[0]}"*')  # a lone syllable: any bigram starting with it
        elif terms:
            clauses.append('"' + " ".join(terms) + '"')
    return " AND ".join(clauses)


def index_path(data_dir: DataDir) -> Path:
    """The index file, on this machine (``local_dir`` when the lake is on object storage)."""
    return storage.locate(data_dir).local_dir / "search.sqlite"


def open_index(data_dir: DataDir) -> sqlite3.Connection:
    path = index_path(data_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    con = sqlite3.connect(path, timeout=60)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute("PRAGMA synchronous=NORMAL")
    con.executescript(_SCHEMA)
    return con


def refresh_index(data_dir: DataDir, *, batch_rows: int = 2000) -> int:
    """Bring the index up to date with the ``documents`` parts; returns rows (re)indexed."""
    # The files of the table's current version (its log decides; a file is never changed
    # in place, so a file already indexed needs no second look).
    lake = storage.locate(data_dir)
    parts = {path: 0 for path in storage.data_files(lake, "documents")}
    with closing(open_index(lake)) as con:
        built_from = con.execute("SELECT value FROM meta WHERE name = 'lake'").fetchone()
        if built_from is None or built_from[0] != lake.root:
            _reset(con, lake.root)  # a copy of an index built from another lake: start over
        known = dict(con.execute("SELECT path, mtime_ns FROM parts").fetchall())
        new = sorted(p for p, m in parts.items() if known.get(p) != m)
        if not new:
            return 0
        sql = f"""
            SELECT bucket, key, etag, kind, status, text, CAST(extracted_at AS VARCHAR)
            FROM ({storage.warehouse.files_sql(lake, "documents", new)})
            QUALIFY row_number() OVER (PARTITION BY bucket, key ORDER BY extracted_at DESC) = 1
        """
        indexed = 0
        with lake.connect() as dcon:
            cur = dcon.execute(sql)
            while rows := cur.fetchmany(batch_rows):
                with con:
                    indexed += _upsert(con, rows)
        with con:  # the files of the current version only: the list stays the table's size
            con.execute("DELETE FROM parts")
            con.executemany("INSERT INTO parts (path, mtime_ns) VALUES (?, ?)", list(parts.items()))
        return indexed


def _reset(con: sqlite3.Connection, lake_root: str) -> None:
    """Empty the index and mark it as built from ``lake_root``."""
    with con:
        con.execute("DELETE FROM docs")
        con.execute("INSERT INTO doc_fts (doc_fts) VALUES ('delete-all')")
        con.execute("DELETE FROM parts")
        con.execute("INSERT OR REPLACE INTO meta (name, value) VALUES ('lake', ?)", (lake_root,))


def _upsert(con: sqlite3.Connection, rows: list[tuple[Any, ...]]) -> int:
    n = 0
    for bucket, key, etag, kind, status, text, extracted_at in rows:
        old = con.execute(
            "SELECT id, extracted_at, text FROM docs WHERE bucket = ? AND key = ?", (bucket, key)
        ).fetchone()
        if old and old[1] and extracted_at and old[1] >= extracted_at:
            continue  # the index already holds a newer row of this key
        text = text or ""
        if old:
            if old[2]:  # contentless FTS: delete by giving the indexed body again
                con.execute(
                    "INSERT INTO doc_fts (doc_fts, rowid, body) VALUES ('delete', ?, ?)",
                    (old[0], " ".join(index_terms(old[2]))),
                )
            con.execute(
                "UPDATE docs SET etag = ?, kind = ?, status = ?, extracted_at = ?, text = ? "
                "WHERE id = ?",
                (etag, kind, status, extracted_at, text, old[0]),
            )
            doc_id = old[0]
        else:
            doc_id = con.execute(
                "INSERT INTO docs (bucket, key, etag, kind, status, extracted_at, text) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (bucket, key, etag, kind, status, extracted_at, text),
            ).lastrowid
        if text:
            con.execute(
                "INSERT INTO doc_fts (rowid, body) VALUES (?, ?)",
                (doc_id, " ".join(index_terms(text))),
            )
        n += 1
    return n


def search(
    data_dir: DataDir, words: str, *, limit: int = 10, kind: str | None = None, refresh: bool = True
) -> list[Hit]:
    """The best ``limit`` documents for ``words`` (all words must match), best first."""
    if refresh:
        refresh_index(data_dir)
    query = fts_query(words)
    if not query:
        return []
    with closing(open_index(data_dir)) as con:
        sql = (
            "SELECT d.bucket, d.key, d.kind, bm25(doc_fts) AS score, d.text "
            "FROM doc_fts JOIN docs d ON d.id = doc_fts.rowid WHERE doc_fts MATCH ? "
            "AND d.status <> 'deleted' "
        )
        params: list[Any] = [query]
        if kind:
            sql += "AND d.kind = ? "
            params.append(kind)
        sql += "ORDER BY score LIMIT ?"
        params.append(limit)
        rows = con.execute(sql, params).fetchall()
    hits = [
        Hit(key=key, kind=k, score=round(-score, 3), snippet=snippet(text, words), bucket=bucket)
        for bucket, key, k, score, text in rows
    ]
    locate(data_dir, hits, words)
    return hits


def locate(data_dir: DataDir, hits: list[Hit], words: str) -> None:
    """Set each hit's page, heading path and chunk id: those of its first current chunk
    (``document_chunks``) whose text holds a query word (or, for CJK words, one of their
    bigrams, as the index matched them); a document without chunks keeps none."""
    if not hits:
        return
    from ingest.extract.structure import CURRENT

    wanted = [(h.bucket, h.key) for h in hits]
    pairs = ", ".join("(?, ?)" for _ in wanted)
    try:
        _cols, found = storage.query(
            data_dir,
            f"""SELECT t.bucket, t.key, t.page_start, t.heading, t.chunk_id, t.text
                FROM document_chunks t JOIN documents d ON {CURRENT}
                WHERE (t.bucket, t.key) IN (VALUES {pairs})
                ORDER BY t.bucket, t.key, t.position""",
            [v for pair in wanted for v in pair],
        )
    except duckdb.Error:  # a lake from before chunks: hits without a place
        return
    needles = [t.casefold() for t in _needles(words)]
    by_key: dict[tuple[str, str], Hit] = {(h.bucket, h.key): h for h in hits}
    for bucket, key, page, heading, chunk, text in found:
        hit = by_key.get((bucket, key))
        if hit is None or hit.chunk_id:
            continue
        folded = _fold(text)
        if any(n in folded for n in needles):
            hit.page, hit.heading, hit.chunk_id = page, heading or "", chunk


def _needles(words: str) -> list[str]:
    """What to look for in a chunk: each word, and each CJK word's bigrams."""
    out: list[str] = []
    for word in words.split():
        out.append(_fold(word))
        if _CJK_CHAR.search(word):
            out += [t for t in index_terms(word) if len(t) >= 2]
    return [n for n in out if n]


def _fold(text: str) -> str:
    """Case and diacritics folded, as the index folds them."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    return "".join(c for c in decomposed if not unicodedata.combining(c))


def snippet(text: str, words: str, width: int = 160) -> str:
    """About ``width`` characters of ``text`` around the first query word found."""
    flat = " ".join(text.split())
    low = flat.lower()
    positions = [low.find(w.lower()) for w in words.split()]
    positions = [p for p in positions if p >= 0]
    if not positions:  # matched through bigrams only (a particle between): show the start
        return flat[:width] + ("…" if len(flat) > width else "")
    at = min(positions)
    start = max(0, at - width // 3)
    end = min(len(flat), start + width)
    return ("…" if start else "") + flat[start:end] + ("…" if end < len(flat) else "")
