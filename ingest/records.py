"""Typed records passed between stages and written as rows."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa

ObjectStatus = Literal["downloaded", "skipped", "copied", "deleted", "failed"]
TaskState = Literal["completed", "failed"]


@dataclass(frozen=True, slots=True)
class Downloads:
    """Where a run's downloaded objects go, as its settings say (``Settings.downloads``):
    ``folder`` (``INGEST_S3_DOWNLOAD_DIR``: a local folder, ``s3://bucket/prefix`` or None
    for ``local_dir/objects/<bucket>``) and whether files are kept (``INGEST_KEEP_FILES``).
    What the S3 and extraction functions take instead of the whole settings."""

    folder: str | None
    local_dir: Path
    keep: bool = True

    @property
    def url(self) -> str | None:
        """The destination when it is object storage (``s3://bucket/prefix``)."""
        d = self.folder
        return d.rstrip("/") if d and d.startswith("s3://") else None

    @property
    def stay_local(self) -> bool:
        """True when downloads are kept in a local folder that later stages read from."""
        return self.keep and self.url is None

    def root(self, bucket: str) -> Path:
        """Local folder that mirrors ``bucket/prefix`` (when the destination is local)."""
        if self.folder and self.url is None:
            return Path(self.folder)
        return self.local_dir / "objects" / bucket


@dataclass(frozen=True, slots=True)
class S3Object:
    """One entry of a bucket listing."""

    bucket: str
    key: str
    etag: str
    size: int
    last_modified: datetime


@dataclass(slots=True)
class ObjectResult:
    """One row of ``s3_objects``: what a run did with one object."""

    bucket: str
    key: str
    etag: str | None
    size: int | None
    last_modified: datetime | None
    local_path: str | None
    status: ObjectStatus
    error: str | None = None
    attempts: int = 0
    seconds: float = 0.0
    run_id: str = ""
    ingested_at: datetime | None = None


@dataclass(slots=True)
class TaskTiming:
    """One row of ``task_timings``: one attempt of one task run."""

    flow_run_id: str
    flow_name: str
    task_run_id: str
    task_name: str
    started_at: datetime
    ended_at: datetime | None = None
    seconds: float = 0.0
    items: int = 0
    bytes: int = 0
    attempts: int = 1
    state: TaskState = "completed"
    error: str | None = None
    worker: str | None = None  # the Dask worker (or host:pid) that ran the attempt
    extra: dict[str, int] = field(default_factory=dict)

    def as_row(self) -> dict[str, Any]:
        row = asdict(self)
        row.pop("extra")
        return row


@dataclass(slots=True)
class BatchSummary:
    """What one download batch did, returned to the flow."""

    counts: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    seconds: float = 0.0
    failures: list[tuple[str, str]] = field(default_factory=list)  # the first few
    # What extraction did when the same task extracted the batch (``fetch-batch``).
    extracted: ExtractSummary | None = None
    # The batch's rows are staged under this name: later stages (extraction) read what it
    # downloaded from there, so the flow keeps a few numbers per batch, not its objects.
    name: str = ""

    MAX_FAILURES = 20  # a run summary shows the first 20 failures of the run

    def add(self, result: ObjectResult) -> None:
        self.counts[result.status] = self.counts.get(result.status, 0) + 1
        if result.status == "downloaded":
            self.bytes += result.size or 0
        if result.status == "failed" and len(self.failures) < self.MAX_FAILURES:
            self.failures.append((result.key, result.error or ""))


DocumentStatus = Literal[
    "ok", "empty", "encrypted", "unsupported", "failed", "timeout", "deleted"
]  # deleted: the object is gone from the bucket (its text is dropped)


@dataclass(slots=True)
class Document:
    """One row of ``documents``: the text extracted from one stored object.

    ``metadata`` holds what the format has (title, author, layouts, drawing
    version, warnings); it is stored as a JSON string.
    """

    bucket: str
    key: str
    etag: str
    kind: str
    status: DocumentStatus
    pages: int = 0
    chars: int = 0
    needs_ocr: int = 0
    text: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    extractor: str = ""
    extractor_version: str = ""
    bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    run_id: str = ""
    extracted_at: datetime | None = None
    # Pages, drawing data, markdown (ingest.extract.structure): rows of their own tables,
    # not columns of this one.
    structure: dict[str, Any] = field(default_factory=dict, repr=False)

    def as_row(self) -> dict[str, Any]:
        row = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "structure"}
        row["markdown"] = self.structure.get("markdown")
        row["metadata"] = json.dumps(self.metadata, ensure_ascii=False, default=str)
        return row


@dataclass(slots=True)
class ExtractSummary:
    """What one extract batch did, returned to the flow."""

    counts: dict[str, int] = field(default_factory=dict)
    unchanged: int = 0
    bytes: int = 0
    pages: int = 0
    seconds: float = 0.0
    # The first documents whose text could not be extracted: (key, status, error).
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    # Documents extracted ("ok") with pages that are images without a text layer, left
    # unread (OCR off, or over its page cap): their count, and the first ones (key, pages).
    needs_ocr: int = 0
    needs_ocr_first: list[tuple[str, int]] = field(default_factory=list)

    MAX_FAILURES = 20

    def note_failures(self, docs: Iterable[Document]) -> ExtractSummary:
        """Keep the first failed extractions of ``docs`` (statuses in EXTRACT_FAILED)."""
        for d in docs:
            if d.status in EXTRACT_FAILED and len(self.failures) < self.MAX_FAILURES:
                self.failures.append((d.key, d.status, d.error or ""))
        return self


# Document statuses that mean the text could not be extracted, and of those the ones no
# retry fixes (a corrupt document, an unsupported format, an encrypted file): the next run
# does not extract them again either, unless the object changes.
EXTRACT_FAILED = ("failed", "timeout", "unsupported", "encrypted")
EXTRACT_PERMANENT = ("failed", "unsupported", "encrypted")
# Error kinds of object rows that a retry cannot fix (the key itself is the problem).
PERMANENT_ERRORS = ("UnsafeKeyError",)


def permanent_object_error(error: str | None) -> bool:
    """True when an ``s3_objects`` error row names a failure no later run fixes."""
    return (error or "").startswith(PERMANENT_ERRORS)


@dataclass(frozen=True, slots=True)
class ObjectBatch:
    """A batch of listed objects handed to a task: a name and Arrow IPC bytes.

    One opaque value instead of a list of objects, so Prefect's walk over task
    parameters costs the same for 1 object as for 1,000, and the batch pickles
    compactly to a remote worker.
    """

    name: str
    count: int
    ipc: bytes

    @classmethod
    def from_table(cls, name: str, table: pa.Table) -> ObjectBatch:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table)
        return cls(name=name, count=table.num_rows, ipc=sink.getvalue().to_pybytes())

    def table(self) -> pa.Table:
        return pa.ipc.open_stream(self.ipc).read_all()

    def objects(self) -> list[S3Object]:
        names = [f.name for f in fields(S3Object)]
        return [S3Object(**row) for row in self.table().select(names).to_pylist()]

    def stored(self) -> list[tuple[str, str, str]]:
        """(key, etag, local path) of objects already on disk (``prev_path``)."""
        t = self.table()
        return list(
            zip(*(t.column(c).to_pylist() for c in ("key", "etag", "prev_path")), strict=True)
        )


@dataclass(frozen=True, slots=True)
class Shard:
    """Keys ``start <= key < end`` of the listing (None: unbounded)."""

    index: int
    start: str | None = None
    end: str | None = None


@dataclass(frozen=True, slots=True)
class Cursor:
    """Where a shard's listing resumes: the continuation token and the last key listed."""

    token: str | None = None
    after: str | None = None
    chunk: int = 0


@dataclass(slots=True)
class ListedChunk:
    """One listed chunk of a shard, handed from ``list-objects`` to ``find-changes``: a
    reference to its rows (written to the run's staging as the listing streams) and the
    key range ``(after, upto]`` it covers (to the shard's end when ``next`` is None)."""

    shard: Shard
    chunk: int
    name: str  # the listing's part in the run's staging (``ingest.s3.scan.listing_path``)
    count: int
    after: str | None
    upto: str | None
    next: Cursor | None


@dataclass(slots=True)
class ChunkResult:
    """What one listing chunk found, returned to the flow (bounded by the chunk size)."""

    shard: int
    listed: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    fetch: list[ObjectBatch] = field(default_factory=list)
    extract: list[ObjectBatch] = field(default_factory=list)
    extract_unchanged: int = 0  # unchanged objects whose text is already current
    # Unchanged objects extracted again, by why: {"pdf extractor changed": 3, ...}
    reextract: dict[str, int] = field(default_factory=dict)
    next: Cursor | None = None  # None when the shard is done


def needs_ocr_line(n: int, first: list[tuple[str, int]], shown: int = 3) -> str:
    """The ``n`` documents whose text is (partly) pictures of text (``first``: the first
    ones' keys and pages): extracted, so ``ok``, but with pages no search finds, which a
    user of scans expects to hear of."""
    pages = sum(p for _k, p in first)
    keys = ", ".join(k for k, _p in first[:shown])
    more = f" and {n - min(n, shown)} more" if n > shown else ""
    some = f" ({pages} pages)" if len(first) == n else ""
    return (
        f"needs OCR: {n} document{'s' if n != 1 else ''} with pages that are images without "
        f"text{some}, not searchable: {keys}{more} (INGEST_OCR_ENABLED=true reads them; "
        "documents.needs_ocr counts each one's pages)"
    )
