"""Extract the stored objects of one download batch on the warm worker pool.

Plain functions over injected settings and pools: ``tasks/extraction.py``
wraps them for Prefect; tests and the benchmark call them directly.
Which objects need extraction is decided with the listing (``ingest.s3.changes``):
new and changed objects, and unchanged ones whose ``documents`` row has another
ETag or extractor (``ingest.extract.provenance``).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import shutil
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Any

from ingest.extract import (
    EXTRACTOR_VERSION,
    Extraction,
    cut_text,
    extract_by_head,
    fence,
    provenance,
)
from ingest.extract.base import clean_text
from ingest.extract.chunks import chunk_pages, headings_of
from ingest.extract.detect import HEAD, detect_kind
from ingest.extract.landed import Landed
from ingest.extract.markdown import add_page_text, literal
from ingest.extract.metadata import detect_language
from ingest.extract.ocr import ocr_unavailable
from ingest.extract.pool import Outcome, PoolConfig, WorkerPool
from ingest.records import Document, DocumentStatus, ExtractSummary
from ingest.settings import Extracting

log = logging.getLogger(__name__)

# What a worker runs for each file; tests swap in a hook with the same signature.
DEFAULT_EXTRACTOR = "ingest.extract:extract_stored"
# extractor_version of a row whose extraction was interrupted (never a real version).
INTERRUPTED = "interrupted"
OCR_JOB = "ingest.extract.ocr:ocr_pdf_pages"
_CUTS = ("text_cut", "pages_cut", "markdown_cut")  # cut_text's records in the metadata

Stored = tuple[str, str, str]  # (key, etag, local_path) of an object on disk


def run_deadline(started: float | None, budget: float | None) -> float | None:
    """The monotonic time after which this run submits no more files, or None: ``budget``
    seconds from ``started`` (when this process started extracting for the run, which
    the run's context keeps), or from now."""
    if budget is None:
        return None
    return (time.monotonic() if started is None else started) + budget


@functools.cache
def work_root() -> Path:
    """This process's folder for the temporary folders of batches whose files are not kept
    (``ingest.s3.fetch.work_folder``, ``tasks.extraction``): one folder, made once, so that
    the parsers' fence grants it and not the whole temporary folder. Removed at exit."""
    root = Path(tempfile.mkdtemp(prefix="ingest-work-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def parser_roots(settings: Extracting) -> tuple[str, ...]:
    """The folders a run's parsers read files from, and nothing else of the machine's
    (``ingest.extract.fence``): ``work_root``, where a batch whose files are not kept
    lands, and the download folder when files stay there (``INGEST_S3_DOWNLOAD_DIR``, else
    ``DATA_DIR/objects``)."""
    roots = [str(work_root())]
    if settings.downloads.stay_local:
        roots.append(settings.downloads.folder or str(settings.downloads.local_dir / "objects"))
    return tuple(roots)


def parsers_can_read(settings: Extracting, path: str) -> bool:
    """Whether the run's parsers may read the file at ``path``: it lies in one of
    ``parser_roots``, or this kernel sets no fence."""
    if fence.landlock_abi() < 1:
        return True
    real = Path(path).resolve()
    return any(real.is_relative_to(Path(root).resolve()) for root in parser_roots(settings))


def pool_config(settings: Extracting, job: str = DEFAULT_EXTRACTOR) -> PoolConfig:
    """The run's extraction pool (or, with ``job`` ``OCR_JOB``, its OCR pool)."""
    group = settings.ocr if job == OCR_JOB else settings.extract
    return PoolConfig(
        workers=group.workers,
        time_limit=group.time_limit,
        memory_limit_mb=settings.extract.memory_limit_mb,
        preload=(job,),
        read_roots=parser_roots(settings),
    )


def ocr_pool_config(settings: Extracting) -> PoolConfig:
    return pool_config(settings, OCR_JOB)


def extract_batch(
    settings: Extracting,
    bucket: str,
    stored: Sequence[Stored],
    *,
    run_id: str,
    pool: WorkerPool | None = None,
    ocr_pool: WorkerPool | None = None,
    extractor: str = DEFAULT_EXTRACTOR,
    started: float | None = None,
    landed: Landed | None = None,
) -> list[Document]:
    """One ``documents`` row per stored object, whatever happens to its parser.

    ``pool`` (and ``ocr_pool`` with ``ocr_enabled``) are the run's, held by its context
    (``ingest.context.RunContext``); needed only when a document goes to a parser, so
    their workers start only then. Timeouts and crashed workers become rows (``timeout``,
    ``failed``); the pool replaces the worker. An interrupted job (its worker killed
    from outside twice) is a ``failed`` row that the next run extracts again.

    Files are handed to the pool a few at a time, so that once the run's budget
    (``extract_run_budget``, from ``started``: this process's first extraction of the
    run, or this call) is spent
    the rest are not parsed: each becomes a ``timeout`` row that the next run extracts
    again. Texts longer than ``extract_max_chars`` are cut in the worker.

    ``landed``: the run's outcomes settled as its downloads landed (``ingest.extract.
    landed``); a file found there is neither opened nor read again.
    """
    if not stored:  # nothing to parse: no worker processes to start (seconds of spawn)
        return []
    deadline = run_deadline(started, settings.extract.run_budget)
    default = extractor == DEFAULT_EXTRACTOR
    ahead = 2 * (settings.extract.workers or os.cpu_count() or 2)
    # What the first bytes decide (empty, unsupported, DWG of R12) is settled here, with the
    # default extractor, or was as the file landed; only files a parser reads go to the
    # workers, and a landed one may be there already.
    landings = [landed.take(path) if landed is not None else None for _k, _e, path in stored]
    settled = [
        (lg.outcome if lg is not None else extract_by_head(Path(path), key)) if default else None
        for (key, _etag, path), lg in zip(stored, landings, strict=True)
    ]
    futures: list[Future[Outcome] | None] = []
    waiting: deque[Future[Outcome]] = deque()
    for (key, _etag, path), done, lg in zip(stored, settled, landings, strict=True):
        if done is not None:
            futures.append(None)
            continue
        if default and lg is not None and lg.parsing is not None:
            futures.append(lg.parsing)  # started as the file landed
            continue
        while len(waiting) >= ahead:
            waiting.popleft().result()
        if deadline is not None and time.monotonic() >= deadline:
            futures.append(None)
            continue
        if pool is None:
            raise ValueError("extract_batch needs the run's extraction pool (pool=)")
        fut = submit_parse(settings, pool, path, key, extractor, start_by=deadline)
        futures.append(fut)
        waiting.append(fut)
    now = datetime.now(UTC)
    docs = []
    for (key, etag, path), done, parse, lg in zip(stored, settled, futures, landings, strict=True):
        if done is not None:
            outcome = Outcome("ok", done)
        elif parse is None or (outcome := parse.result()).status == "budget":  # no worker took it
            budget = settings.extract.run_budget
            docs.append(over_budget(bucket, key, etag, path, budget, run_id, now))
            continue
        size = lg.size if lg is not None else None  # a landed file's size
        docs.append(
            to_document(bucket, key, etag, path, outcome, run_id=run_id, now=now, size=size)
        )
    if settings.ocr.enabled:
        run_ocr(settings, docs, stored, ocr_pool)
    provenance.stamp(docs, settings, keep=INTERRUPTED)  # each kind's exact extractor
    return docs


def submit_parse(
    settings: Extracting,
    pool: WorkerPool,
    path: str,
    key: str,
    extractor: str = DEFAULT_EXTRACTOR,
    *,
    start_by: float | None = None,
) -> Future[Outcome]:
    """The parse of one file on ``pool``, with the run's limits (pages, bytes read into
    memory, characters kept, chunks); not started once ``start_by`` (the run's extraction
    deadline, monotonic) has passed when a worker would take it: a ``budget`` outcome."""
    extra: dict[str, Any] = {}
    if extractor == DEFAULT_EXTRACTOR:  # a test's hook keeps its own signature
        extra = {
            "max_chars": settings.extract.max_chars,
            "chunk_chars": settings.chunk.chars,
            "chunk_overlap": settings.chunk.overlap,
        }
    return pool.submit_by(
        start_by,
        extractor,
        path,
        key,
        settings.extract.max_pages,
        settings.extract.in_memory_bytes,
        **extra,
    )


def parse_as_landed(
    settings: Extracting, pool: Callable[[], WorkerPool], started: Callable[[], float | None]
) -> Callable[[str, str], Future[Outcome] | None]:
    """The ``Landed`` parse of a run: each landed file a parser must read goes to the
    run's pool (``pool()``) at once, with the default extractor, unless the run's
    extraction budget is spent (``started()``: when the run started extracting, as
    ``extract_batch`` counts it)."""

    def parse(path: str, key: str) -> Future[Outcome] | None:
        deadline = run_deadline(started(), settings.extract.run_budget)
        if deadline is not None and time.monotonic() >= deadline:
            return None
        return submit_parse(settings, pool(), path, key, start_by=deadline)

    return parse


def to_document(
    bucket: str,
    key: str,
    etag: str,
    path: str,
    outcome: Outcome,
    *,
    run_id: str,
    now: datetime,
    size: int | None = None,
) -> Document:
    """Turn a pool outcome into a row; non-ok outcomes keep the kind told by the name and
    head. ``size``: the file's, when known (else it is read from the file)."""
    size = _size(path) if size is None else size
    base: dict[str, Any] = {
        "bucket": bucket,
        "key": key,
        "etag": etag,
        "bytes": size,
        "run_id": run_id,
        "extracted_at": now,
        "seconds": round(outcome.seconds, 6),
        "extractor_version": EXTRACTOR_VERSION,
    }
    if outcome.status == "ok" and isinstance(outcome.value, Extraction):
        x = outcome.value
        return Document(
            kind=x.kind,
            status=x.status,
            pages=x.pages,
            chars=len(x.text),
            needs_ocr=x.needs_ocr,
            text=x.text,
            metadata=x.metadata,
            extractor=x.extractor,
            error=x.error,
            structure=x.structure,
            **base,
        )
    kind = _kind_of(path, key)
    status: DocumentStatus = "timeout" if outcome.status == "timeout" else "failed"
    error = outcome.error or "no result"
    if outcome.status == "crashed":
        error = f"parser crashed: {error}"
    if outcome.status == "interrupted":
        # Not the file's fault: the row says so, and its version is not the current
        # one, so the next run's find-changes extracts the file again.
        error = f"extraction interrupted (the next run tries again): {error}"
        base["extractor_version"] = INTERRUPTED
    log.warning("%s: %s: %s", key, status, error.splitlines()[0] if error else "")
    return Document(kind=kind, status=status, error=error[:4000], extractor="pool", **base)


def over_budget(
    bucket: str,
    key: str,
    etag: str,
    path: str,
    budget: float | None,
    run_id: str,
    now: datetime,
) -> Document:
    """The row of a file left unparsed because the run's extraction budget was spent: a
    ``timeout`` whose version is not a real one, so the next run extracts it."""
    return Document(
        bucket=bucket,
        key=key,
        etag=etag,
        kind=_kind_of(path, key),
        status="timeout",
        bytes=_size(path),
        error=f"not extracted: the run's extraction budget (extract_run_budget={budget:g} s) "
        "was spent; the next run extracts it",
        extractor="budget",
        extractor_version=INTERRUPTED,
        run_id=run_id,
        extracted_at=now,
    )


def run_ocr(
    settings: Extracting,
    docs: list[Document],
    stored: Sequence[Stored],
    ocr_pool: WorkerPool | None,
) -> None:
    """OCR the image-only pages of this batch's PDFs, within the queue bound and page cap."""
    candidates = [
        (doc, path)
        for doc, (_k, _e, path) in zip(docs, stored, strict=True)
        if doc.status == "ok" and doc.kind == "pdf" and doc.needs_ocr
    ]
    if not candidates:
        return
    missing = ocr_unavailable(settings.ocr.languages)
    if missing:
        log.warning("OCR is enabled but cannot run: %s", missing)
        for doc, _path in candidates:
            doc.metadata["ocr"] = f"skipped: {missing}"
        return
    if ocr_pool is None:
        raise ValueError("OCR needs the run's OCR pool (ocr_pool=)")
    pool = ocr_pool
    jobs = []
    for doc, path in candidates:
        if pool.pending >= settings.ocr.queue_size:
            doc.metadata["ocr"] = "skipped: OCR queue full"
            continue
        # Pages past the bound (``pages_cut``) have no row for their text: not read.
        kept = len(doc.structure.get("pages") or [])
        pages = [i for i in doc.metadata.get("ocr_pages", []) if i < kept]
        if not pages:
            doc.metadata["ocr"] = "skipped: its pages are past the extract_max_chars bound"
            continue
        fut = pool.submit(
            OCR_JOB,
            path,
            pages,
            dpi=settings.ocr.dpi,
            languages=settings.ocr.languages,
            max_pages=settings.ocr.max_pages,
        )
        jobs.append((doc, fut))
    for doc, fut in jobs:
        outcome = fut.result()
        if outcome.status != "ok":
            doc.metadata["ocr"] = f"{outcome.status}: {(outcome.error or '')[:300]}"
            continue
        add_ocr_text(doc, outcome.value, settings)
        doc.metadata["ocr"] = f"{len(outcome.value)} pages"
        doc.seconds += round(outcome.seconds, 6)


def add_ocr_text(doc: Document, done: Sequence[tuple[int, str]], settings: Extracting) -> None:
    """Put the OCR'd text of each page (``(0-based page, text)``) where the page's text
    layer would be: on its page (``document_pages``), in the whole text in page order,
    after the page's marker in the markdown, and in the chunks, which are cut again;
    then the same bound as in the worker (``extract_max_chars``, ``cut_text``)."""
    pages = list(doc.structure.get("pages") or [])
    markdown = doc.structure.get("markdown")
    added = 0
    for index, raw_text in done:
        text = clean_text(raw_text)
        if 0 <= index < len(pages) and text:
            added += len(text)
            pages[index] = clean_text(pages[index] + "\n\n" + text)
            if markdown is not None:
                markdown = add_page_text(markdown, index + 1, literal(text))
    doc.needs_ocr = max(0, doc.needs_ocr - len(done))
    if not pages:  # pages dropped by the bound: there is nowhere to put the text
        return
    doc.structure["pages"] = pages
    doc.structure["markdown"] = markdown
    doc.text = clean_text("\n\n".join(pages))
    before = {k: dict(doc.metadata[k]) for k in _CUTS if k in doc.metadata}
    cut_text(doc, settings.extract.max_chars)
    for key, was in before.items():  # cut in the worker already: the whole it had, and more
        now = doc.metadata.setdefault(key, was)
        now["chars"] = was["chars"] + added
        if "of" in was:
            now["of"] = was["of"]
    doc.chars = len(doc.text)
    if not doc.metadata.get("language"):
        language = detect_language(doc.text)
        if language:
            doc.metadata["language"] = language
    if "chunks" in doc.structure:
        doc.structure["chunks"] = chunk_pages(
            doc.structure["pages"],
            headings_of(doc.structure.get("markdown")),
            size=settings.chunk.chars,
            overlap=settings.chunk.overlap,
        )


def summarize(docs: Iterable[Document], unchanged: int = 0) -> ExtractSummary:
    summary = ExtractSummary(unchanged=unchanged)
    for d in docs:
        summary.counts[d.status] = summary.counts.get(d.status, 0) + 1
        if d.status == "ok" and d.needs_ocr:
            summary.needs_ocr += 1
            if len(summary.needs_ocr_first) < ExtractSummary.MAX_FAILURES:
                summary.needs_ocr_first.append((d.key, d.needs_ocr))
        summary.bytes += d.bytes
        summary.pages += d.pages
        summary.seconds += d.seconds
    return summary


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _kind_of(path: str, key: str) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(HEAD)
    except OSError:
        head = b""
    return detect_kind(head, PurePosixPath(key).name)
