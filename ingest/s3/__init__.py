"""S3 listing on a shared boto3 client; object GETs on obstore.

Modules, one per concern:

- ``client``: a run's connection (``S3Connection``): the boto3 client, its request
  lanes and the obstore store of each bucket, held by the run, not cached per process.
- ``errors``: botocore failures translated into ``TerminalError`` (``translate_errors``).
- ``listing``: the bucket check and ListObjectsV2 pages (``check_bucket``, ``list_page``).
- ``chunks``: listing in chunks over key ranges, as Arrow.
- ``get``: the GET path, obstore with ``client.get_object`` as the fallback, its
  request retries and stream resumption (``_get``, ``_stream``).
- ``files``: temporary files, their sweep and the atomic rename.
- ``verify``: the check of a downloaded file against the object (size, MD5, multipart
  ETag, S3's additional checksums).
- ``resume``: the journal that lets a large object's download resume after a kill.
- ``download``: one object (``fetch_small``) or many on the shared lanes
  (``BatchDownloader``).

A run over a bucket, one module per step:

- ``scan``: a listed chunk compared with the stored state, its deletions staged and its
  changed objects cut into batches (the ``list-objects`` and ``find-changes`` tasks).
- ``changes``: what changed in one listed key range, computed in DuckDB.
- ``renames``: renamed and copied objects recognised by ETag and size.
- ``schedule``: the order of a run's work, from listed chunks to download batches.
- ``keys``: S3 keys mapped to local paths that cannot leave the download folder.
- ``sync``: a batch downloaded, every outcome a row.
- ``fetch``: a batch's whole job where it runs (download, extract, keep or drop).

Retry layers, one per failure kind:

1. Each GET request is retried in ``get._get_obstore`` (obstore's own retries
   are off so that every request is counted in the ``attempts`` column):
   5xx answers, 429 and throttling/transient codes (503 SlowDown ...,
   ``get._RETRY_CODES``) and connection errors, with capped exponential backoff
   and full jitter (``get._backoff``: 1 s base, 20 s cap, as botocore), up to
   ``Settings.s3.max_attempts`` retries after the first request
   (``get.get_attempts``). The listing's requests get the same policy from
   botocore's ``standard`` retry mode.
2. A body stream broken mid-transfer (connection reset, truncated body,
   read timeout) is resumed in ``get._stream`` with a ``Range`` request from the
   last byte written, up to ``Settings.s3.stream_retries`` times
   (``get.STREAM_ERRORS``).
3. A body that fails its check (``verify``) is downloaded again whole, as many times
   as a request of layer 1 (``download.integrity_passes``), with the same backoff.
4. A batch's rows that cannot be written are written again alone
   (``tasks.s3.stage_rows``); Prefect task retries never re-run S3 requests that
   botocore or layer 1 retried, and a batch is never downloaded again by them.

So one object costs at most ``(s3_max_attempts + 1) x (s3_stream_retries + 1)``
requests per download, and ``s3_max_attempts + 1`` downloads in a run.
"""

from ingest.s3.client import S3Connection
from ingest.s3.download import BatchDownloader, Fetched
from ingest.s3.errors import translate_errors
from ingest.s3.files import sweep_temp
from ingest.s3.listing import check_bucket, list_objects, list_page

__all__ = [
    "BatchDownloader",
    "Fetched",
    "S3Connection",
    "check_bucket",
    "list_objects",
    "list_page",
    "sweep_temp",
    "translate_errors",
]
