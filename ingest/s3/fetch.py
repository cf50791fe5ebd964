"""A batch's whole job where it runs: download, extract, then place or drop the files.

On one machine the download and the extraction of a batch may be two tasks that
meet through a local folder (``ingest.s3.sync``, ``ingest.extract.batch``). Across
machines no local path may cross from one task to another, so a batch is one
job on the worker that runs it: its objects are downloaded into a folder of this
worker, extracted there, and then

* kept in the local download folder (``keep_files`` and a local destination),
* copied to the download destination on object storage (``s3://bucket/prefix``,
  through the source's client) and removed here, or
* dropped (``keep_files`` false) once their text is extracted.

``s3_objects.local_path`` says where the object is kept: a local path, an
``s3://`` address, or nothing when it was dropped. An object whose copy to the
destination fails is a ``failed`` row (downloaded again by the next run).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ingest.extract import batch
from ingest.extract.landed import Landed
from ingest.extract.pool import WorkerPool
from ingest.records import Document, Downloads, ObjectResult, S3Object
from ingest.s3 import S3Connection, keys, sync
from ingest.settings import Extracting

log = logging.getLogger(__name__)

Stored = batch.Stored


@contextmanager
def work_folder(downloads: Downloads, bucket: str) -> Iterator[Path]:
    """Where this worker downloads: the local destination when files stay there, else a
    temporary folder removed when the batch is done."""
    if downloads.stay_local:
        yield downloads.root(bucket)
        return
    folder = Path(tempfile.mkdtemp(prefix="ingest-batch-", dir=batch.work_root()))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fetch_batch(
    conn: S3Connection,
    settings: Extracting,
    objects: Sequence[S3Object],
    *,
    prefix: str,
    run_id: str,
    extract: bool,
    extractor: str = batch.DEFAULT_EXTRACTOR,
    pool: WorkerPool | None = None,
    ocr_pool: WorkerPool | None = None,
    started: float | None = None,
) -> tuple[list[ObjectResult], list[Document]]:
    """Download ``objects``, extract the ones downloaded, place or drop the files.

    Returns the batch's ``s3_objects`` rows and ``documents`` rows. ``pool``,
    ``ocr_pool`` and ``started``: the run's extraction pools and when it started
    extracting (``ingest.extract.batch.extract_batch``).
    """
    if not objects:
        return [], []
    bucket = objects[0].bucket
    with work_folder(settings.downloads, bucket) as folder:
        # what the first bytes decide is settled, and the rest starts parsing, as each file
        # lands (ingest.extract.landed)
        parse = None
        if pool is not None and extractor == batch.DEFAULT_EXTRACTOR:
            parse = batch.parse_as_landed(settings, lambda: pool, lambda: started)
        landed = Landed(parse) if extract else None
        results = sync.download_batch(
            conn, folder, objects, prefix=prefix, run_id=run_id, landed=landed
        )
        stored = [
            (r.key, r.etag or "", r.local_path)
            for r in results
            if r.status == "downloaded" and r.local_path
        ]
        docs = (
            batch.extract_batch(
                settings,
                bucket,
                stored,
                run_id=run_id,
                extractor=extractor,
                pool=pool,
                ocr_pool=ocr_pool,
                started=started,
                landed=landed,
            )
            if extract
            else []
        )
        if not settings.downloads.stay_local:
            place_files(conn, settings.downloads, results, prefix)
    return results, docs


def destination_of(url: str, key: str, prefix: str) -> tuple[str, str]:
    """The bucket and key of ``key``'s copy under the download destination ``url``
    (``s3://bucket/prefix``): its path below the run's ``prefix``, as in a local folder."""
    dest_bucket, _, dest_prefix = url.removeprefix("s3://").partition("/")
    rel = keys.relative_key(key, prefix)
    return dest_bucket, f"{dest_prefix}/{rel}" if dest_prefix else rel


def place_files(
    conn: S3Connection, downloads: Downloads, results: list[ObjectResult], prefix: str
) -> None:
    """Copy downloaded files to the destination on object storage, or forget them; the
    rows then say where each object is kept."""
    url = downloads.url if downloads.keep else None
    for r in results:
        if r.status != "downloaded" or not r.local_path:
            continue
        if url is None:
            r.local_path = None
            continue
        dest_bucket, dest_key = destination_of(url, r.key, prefix)
        try:
            conn.client.upload_file(r.local_path, dest_bucket, dest_key)
        except Exception as exc:  # any failure of this object's copy is its row, not the run's
            log.warning("s3://%s/%s not copied to %s: %s", r.bucket, r.key, url, exc)
            r.status = "failed"
            r.error = sync.describe_error(exc)
            r.local_path = None
            continue
        r.local_path = f"s3://{dest_bucket}/{dest_key}"


def materialize(
    conn: S3Connection,
    settings: Extracting,
    objects: Sequence[S3Object],
    paths: Sequence[str | None],
    *,
    prefix: str,
    folder: Path,
) -> list[Stored]:
    """Readable local files for stored objects whose text must be extracted again.

    A path of this machine is used as it is (copied into ``folder`` when it lies outside
    the folders the parsers may read, ``batch.parser_roots``); a copy on object storage
    (``s3://``) is fetched from there; an object kept nowhere reachable (dropped, or on
    another machine's disk) is fetched from the source again. Objects that cannot be
    fetched are left out (their ``documents`` rows stay as they were).
    """
    out: list[Stored] = []
    refetch: list[S3Object] = []
    for obj, path in zip(objects, paths, strict=True):
        if path and path.startswith("s3://"):
            src_bucket, _, src_key = path.removeprefix("s3://").partition("/")
            local = folder / "copies" / f"{len(out)}-{Path(src_key).name}"
            local.parent.mkdir(parents=True, exist_ok=True)
            try:
                conn.client.download_file(src_bucket, src_key, str(local))
            except Exception as exc:  # a missing copy: fetch the object from the source
                log.info("%s not read (%s); fetching s3://%s/%s", path, exc, obj.bucket, obj.key)
                refetch.append(obj)
                continue
            out.append((obj.key, obj.etag, str(local)))
        elif path and Path(path).is_file():
            if not batch.parsers_can_read(settings, path):
                # outside the folders the parsers' fence grants (an earlier download
                # folder): a copy in this one, which it does
                local = folder / "copies" / f"{len(out)}-{Path(path).name}"
                local.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, local)
                path = str(local)
            out.append((obj.key, obj.etag, path))
        else:
            refetch.append(obj)
    if refetch:
        for r in sync.download_batch(conn, folder / "source", refetch, prefix=prefix, run_id=""):
            if r.status == "downloaded" and r.local_path:
                out.append((r.key, r.etag or "", r.local_path))
    return out
