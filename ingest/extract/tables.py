"""The tables of text extraction: each document, its log, and its structured outputs."""

from __future__ import annotations

import pyarrow as pa

from ingest.storage.tables import STATE_PARTS, TS, TableSpec, per_document, without

DOCUMENTS = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("kind", pa.string()),
        ("status", pa.string()),
        ("pages", pa.int32()),
        ("chars", pa.int64()),
        ("needs_ocr", pa.int32()),
        ("text", pa.string()),
        ("markdown", pa.string()),  # headings, lists and tables (ingest.extract.markdown)
        ("metadata", pa.string()),
        ("extractor", pa.string()),
        ("extractor_version", pa.string()),
        ("bytes", pa.int64()),
        ("seconds", pa.float64()),
        ("error", pa.string()),
        ("run_id", pa.string()),
        ("extracted_at", TS),
    ]
)

# Structured outputs of extraction (ingest.extract.structure), beside ``documents``:
# the text of each page (DOCX, HTML and text files are one page; a DXF drawing has a
# page per layout), each ATTRIB of a drawing's block references, and each drawing's
# header data. ``etag`` says which version of the object a row comes from.
DOCUMENT_PAGES = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("status", pa.string()),  # ok; deleted once the object is gone
        ("page", pa.int32()),
        ("text", pa.string()),
        ("chars", pa.int64()),
        ("extractor", pa.string()),
        ("extractor_version", pa.string()),
        ("run_id", pa.string()),
        ("extracted_at", TS),
    ]
)

# Chunks for retrieval (ingest.extract.chunks): spans of a page's text, with a stable id.
DOCUMENT_CHUNKS = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("status", pa.string()),  # ok; deleted once the object is gone
        ("position", pa.int32()),  # 1, 2, ... in reading order
        ("chunk_id", pa.string()),
        ("page_start", pa.int32()),
        ("page_end", pa.int32()),
        ("heading", pa.string()),  # the heading path: "Materials > Pipes"
        ("start", pa.int64()),  # the span in the page's text (document_pages.text)
        ("end", pa.int64()),
        ("text", pa.string()),
        ("chars", pa.int64()),
        ("extractor_version", pa.string()),
        ("run_id", pa.string()),
        ("extracted_at", TS),
    ]
)

DXF_ATTRIBUTES = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("status", pa.string()),  # ok; deleted once the object is gone
        ("position", pa.int32()),  # 1, 2, ... in layout and drawing order
        ("layout", pa.string()),
        ("block", pa.string()),
        ("tag", pa.string()),
        ("value", pa.string()),
        ("layer", pa.string()),
        ("insert_x", pa.float64()),
        ("insert_y", pa.float64()),
        ("insert_z", pa.float64()),
        ("handle", pa.string()),
        ("extractor_version", pa.string()),
        ("run_id", pa.string()),
        ("extracted_at", TS),
    ]
)

DXF_DRAWINGS = pa.schema(
    [
        ("bucket", pa.string()),
        ("key", pa.string()),
        ("etag", pa.string()),
        ("status", pa.string()),  # ok; deleted once the object is gone
        ("acadver", pa.string()),
        ("release", pa.string()),
        ("insunits", pa.int32()),
        ("units", pa.string()),
        ("layers", pa.list_(pa.string())),
        ("blocks", pa.list_(pa.string())),
        ("layouts", pa.list_(pa.string())),
        ("text_heights", pa.list_(pa.float64())),
        ("attributes", pa.int32()),
        ("extractor_version", pa.string()),
        ("run_id", pa.string()),
        ("extracted_at", TS),
    ]
)

TABLES = (
    TableSpec(
        "documents",
        "state",
        DOCUMENTS,
        keys=("bucket", "key"),
        newer="extracted_at",
        log="document_log",
        sort=("bucket", "key"),
        parts=STATE_PARTS,
    ),
    TableSpec(
        "document_log", "history", without(DOCUMENTS, "text", "markdown"), day_from="extracted_at"
    ),
    # Keyed by object and position, the object's key last: its hash is the ``part``.
    per_document("document_pages", DOCUMENT_PAGES, "page"),
    per_document("document_chunks", DOCUMENT_CHUNKS, "position"),
    per_document("dxf_attributes", DXF_ATTRIBUTES, "position"),
    TableSpec(
        "dxf_drawings",
        "state",
        DXF_DRAWINGS,
        keys=("bucket", "key"),
        newer="extracted_at",
        sort=("bucket", "key"),
    ),
)
