"""Rows of the structured tables, from the documents a batch extracted.

The worker returns, with each ``Extraction``, plain lists in ``structure`` (the text of
each page, its chunks, a drawing's attributes and header data); here they become the
rows of ``document_pages``, ``document_chunks``, ``dxf_attributes`` and ``dxf_drawings``,
staged beside the batch's ``documents`` part under the same name (a retried batch
overwrites all of them).

Which rows are current: every row carries the ``etag`` and ``extracted_at`` of the
``documents`` row it was extracted with. The tables are merged by object and position,
so a document that shrinks (fewer pages, fewer attributes) leaves its older positions
behind with an older ``extracted_at``; a deleted object's rows are marked ``deleted``
(``status``) by the run that sees it gone, as its ``documents`` row is (their text
stays: these tables have no log). Join on ``documents`` (same bucket, key, etag and
extracted_at, status ``ok``) to read only the current ones (``CURRENT`` is that join's
condition).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from ingest import storage
from ingest.extract.chunks import chunk_id
from ingest.records import Document
from ingest.storage.location import DataDir

TABLES = ("document_pages", "document_chunks", "dxf_attributes", "dxf_drawings")
# The kinds whose drawing data fill ``dxf_attributes`` and ``dxf_drawings``: a DWG is read
# into the same model as a DXF (``ingest.extract.dwg``).
DRAWING_KINDS = ("dxf", "dwg")
# The join condition of a structured table ``t`` with ``documents`` ``d`` that keeps its
# current rows (see the module's docstring).
CURRENT = (
    "t.bucket = d.bucket AND t.key = d.key AND t.etag = d.etag "
    "AND t.extracted_at = d.extracted_at AND d.status = 'ok'"
)


def _base(doc: Document) -> dict[str, Any]:
    return {
        "bucket": doc.bucket,
        "key": doc.key,
        "etag": doc.etag,
        "status": "ok",
        "extractor_version": doc.extractor_version,
        "run_id": doc.run_id,
        "extracted_at": doc.extracted_at,
    }


def page_rows(doc: Document) -> list[dict[str, Any]]:
    """One row per page of an ``ok`` document; a format without pages is one page (its
    whole text), a DXF drawing has one page per layout (model space first)."""
    if doc.status != "ok":
        return []
    pages: Sequence[str] = doc.structure.get("pages") or [doc.text]
    base = _base(doc)
    return [
        {**base, "page": i, "text": text, "chars": len(text), "extractor": doc.extractor}
        for i, text in enumerate(pages, start=1)
    ]


def chunk_rows(doc: Document) -> list[dict[str, Any]]:
    """One row per chunk (``ingest.extract.chunks``), its text cut from its page."""
    chunks = doc.structure.get("chunks")
    if doc.status != "ok" or not chunks:
        return []
    pages: Sequence[str] = doc.structure.get("pages") or [doc.text]
    base = _base(doc)
    out = []
    for i, (page, start, end, heading) in enumerate(chunks, start=1):
        text = pages[page - 1][start:end]
        out.append(
            {
                **base,
                "position": i,
                "chunk_id": chunk_id(doc.bucket, doc.key, doc.etag, page, start, end),
                "page_start": page,
                "page_end": page,
                "heading": heading,
                "start": start,
                "end": end,
                "text": text,
                "chars": len(text),
            }
        )
    return out


def attribute_rows(doc: Document) -> list[dict[str, Any]]:
    """One row per ATTRIB of every INSERT of a drawing (``ingest.extract.dxf_data``)."""
    if doc.status != "ok" or doc.kind not in DRAWING_KINDS:
        return []
    base = _base(doc)
    names = ("layout", "block", "tag", "value", "layer", "insert_x", "insert_y", "insert_z")
    return [
        {**base, "position": i, **dict(zip(names, a[:8], strict=True)), "handle": a[8]}
        for i, a in enumerate(doc.structure.get("attributes") or [], start=1)
    ]


def drawing_rows(doc: Document) -> list[dict[str, Any]]:
    """The drawing's header data, one row."""
    drawing = doc.structure.get("drawing")
    if doc.status != "ok" or doc.kind not in DRAWING_KINDS or not drawing:
        return []
    return [
        {
            **_base(doc),
            **drawing,
            "attributes": len(doc.structure.get("attributes") or []),
        }
    ]


def rows(docs: Iterable[Document]) -> dict[str, list[dict[str, Any]]]:
    """The structured tables' rows of these documents."""
    out: dict[str, list[dict[str, Any]]] = {t: [] for t in TABLES}
    for doc in docs:
        out["document_pages"].extend(page_rows(doc))
        out["document_chunks"].extend(chunk_rows(doc))
        out["dxf_attributes"].extend(attribute_rows(doc))
        out["dxf_drawings"].extend(drawing_rows(doc))
    return out


def stage_documents(data_dir: DataDir, run_id: str, name: str, docs: Sequence[Document]) -> None:
    """Stage a batch's ``documents`` rows and its structured tables' rows as parts ``name``."""
    storage.stage(data_dir, run_id, "documents", name, [d.as_row() for d in docs])
    for table, table_rows in rows(docs).items():
        storage.stage(data_dir, run_id, table, name, table_rows)


def deleted_rows(
    table_sql: str, table: str, keys: list[str], bucket: str, run_id: str, *, db: Any
) -> Any:
    """The rows of ``table`` (a ``storage.scan`` expression) of the deleted objects
    ``keys``, marked ``deleted`` with this run and time (so the MERGE takes them);
    queried in ``db``, the run's ``ingest.s3.changes.ListingDatabase``."""
    import pyarrow as pa

    if not keys:
        return pa.Table.from_pylist([], schema=storage.SCHEMAS[table])
    with db.cursor() as con:
        con.register("gone", pa.table({"key": keys}))
        found = con.execute(
            f"""SELECT * REPLACE ('deleted' AS status, ? AS run_id, ? AS extracted_at)
                FROM {table_sql} t
                WHERE bucket = ? AND status IS DISTINCT FROM 'deleted'
                  AND key IN (SELECT key FROM gone)""",
            [run_id, datetime.now(UTC), bucket],
        ).fetch_arrow_table()
        con.unregister("gone")
    schema = storage.SCHEMAS[table]
    if set(schema.names) <= set(found.column_names):  # kept in Arrow: no dict per row
        return found.select(schema.names).cast(schema)
    return pa.Table.from_pylist(found.to_pylist(), schema=schema)
