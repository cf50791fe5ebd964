"""Listing on the boto3 client: the bucket check and ListObjectsV2 pages.

The listing's requests are retried by botocore's ``standard`` retry mode (set up by
``ingest.s3.client.S3Connection.open``); bucket-level failures become ``TerminalError``
(``ingest.s3.errors.translate_errors``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ingest.records import S3Object
from ingest.s3.errors import translate_errors


@dataclass(slots=True)
class ListPage:
    """One page of a listing: up to 1,000 objects and the token of the next page."""

    objects: list[S3Object]
    next_token: str | None


def check_bucket(client: Any, bucket: str) -> None:
    """Fail fast, with a hint, when the bucket is missing or not ours.

    A one-key listing rather than HeadBucket: HEAD answers carry no error body,
    so a 403 could not tell rejected credentials from a missing permission.
    """
    with translate_errors(bucket):
        client.list_objects_v2(Bucket=bucket, MaxKeys=1)


def list_page(
    client: Any,
    bucket: str,
    prefix: str,
    token: str | None = None,
    start_after: str | None = None,
) -> ListPage:
    """One ListObjectsV2 page (from ``token``, else after ``start_after``). Pages are
    fetched one by one so that the caller can start on the first while asking for the next."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": 1000}
    if token:
        kwargs["ContinuationToken"] = token
    elif start_after:
        kwargs["StartAfter"] = start_after
    with translate_errors(bucket):
        resp = client.list_objects_v2(**kwargs)
    objects = [
        S3Object(
            bucket=bucket,
            key=item["Key"],
            etag=item.get("ETag", "").strip('"'),
            size=int(item.get("Size", 0)),
            last_modified=item["LastModified"],
        )
        for item in resp.get("Contents", ())
    ]
    next_token = resp.get("NextContinuationToken") if resp.get("IsTruncated") else None
    return ListPage(objects, next_token)


def common_prefixes(client: Any, bucket: str, prefix: str) -> Iterator[str]:
    """The common prefixes one ``/`` level below ``prefix`` (a delimiter listing), in the
    order S3 lists them, page by page."""
    kwargs: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
    while True:
        with translate_errors(bucket):
            resp = client.list_objects_v2(**kwargs)
        for common in resp.get("CommonPrefixes", ()):
            yield common["Prefix"]
        if not resp.get("IsTruncated"):
            return
        kwargs["ContinuationToken"] = resp["NextContinuationToken"]


def list_objects(client: Any, bucket: str, prefix: str = "") -> Iterator[S3Object]:
    """Every object under ``prefix``, streamed page by page."""
    token: str | None = None
    while True:
        page = list_page(client, bucket, prefix, token)
        yield from page.objects
        if not page.next_token:
            return
        token = page.next_token
