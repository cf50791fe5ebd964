"""The REST sources' tables: the GitHub dialect's pull requests, pages and syncs, what each
host allowed in flight, each listing's sync, and one table per resource of a declared
source."""

from __future__ import annotations

import pyarrow as pa

from ingest.storage.tables import TS, TableSpec, without

PULL_REQUESTS = pa.schema(
    [
        ("repo", pa.string()),
        ("number", pa.int64()),
        ("id", pa.int64()),
        ("title", pa.string()),
        ("state", pa.string()),
        ("draft", pa.bool_()),
        ("user_login", pa.string()),
        ("labels", pa.list_(pa.string())),
        ("created_at", TS),
        ("updated_at", TS),
        ("closed_at", TS),
        ("merged_at", TS),
        ("head_ref", pa.string()),
        ("base_ref", pa.string()),
        ("html_url", pa.string()),
        ("body", pa.string()),
        ("fetched_at", TS),
        ("run_id", pa.string()),
    ]
)

API_REQUESTS = pa.schema(
    [
        ("run_id", pa.string()),
        ("repo", pa.string()),
        ("url", pa.string()),
        ("status", pa.int32()),
        ("seconds", pa.float64()),
        ("bytes", pa.int64()),
        ("from_cache", pa.bool_()),
        ("rate_remaining", pa.int64()),
        ("rate_limit", pa.int64()),
        ("rate_resource", pa.string()),
        ("attempt", pa.int32()),
        ("error", pa.string()),
        ("requested_at", TS),
    ]
)

GITHUB_PAGES = pa.schema(
    [
        ("repo", pa.string()),
        ("state", pa.string()),
        ("per_page", pa.int32()),
        ("page", pa.int32()),
        ("url", pa.string()),
        ("etag", pa.string()),
        ("link", pa.string()),
        ("items", pa.int32()),
        ("newest_updated_at", TS),
        ("oldest_updated_at", TS),
        ("run_id", pa.string()),
        ("fetched_at", TS),
    ]
)

GITHUB_SYNCS = pa.schema(
    [
        ("repo", pa.string()),
        ("state", pa.string()),
        ("per_page", pa.int32()),
        ("watermark", TS),
        ("complete", pa.bool_()),
        ("stop_reason", pa.string()),
        ("pages", pa.int32()),
        ("requests", pa.int32()),
        ("not_modified", pa.int32()),
        ("items", pa.int64()),
        ("failed_pages", pa.int32()),
        ("run_id", pa.string()),
        ("started_at", TS),
        ("ended_at", TS),
    ]
)

API_WINDOWS = pa.schema(
    [
        ("host", pa.string()),
        ("window_size", pa.int32()),
        ("ceiling", pa.int32()),
        ("limit_answers", pa.int64()),
        ("requests", pa.int64()),
        ("run_id", pa.string()),
        ("updated_at", TS),
    ]
)

REST_SYNCS = pa.schema(
    [
        ("source", pa.string()),
        ("resource", pa.string()),
        ("parent_key", pa.string()),
        ("watermark", pa.string()),
        ("complete", pa.bool_()),
        ("stop_reason", pa.string()),
        ("pages", pa.int32()),
        ("requests", pa.int32()),
        ("items", pa.int64()),
        ("failed_pages", pa.int32()),
        ("page_size", pa.int32()),
        ("run_id", pa.string()),
        ("started_at", TS),
        ("ended_at", TS),
    ]
)

# The table of each resource (``ingest.storage.tables.is_resource_table``): the record as
# JSON in ``data``, its primary key (for a child resource, prefixed with its parent's) in
# ``key``, and the incremental cursor's value in ``cursor``.
RESOURCE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),
        ("parent_key", pa.string()),
        ("source", pa.string()),
        ("resource", pa.string()),
        ("cursor", pa.string()),
        ("data", pa.string()),
        ("run_id", pa.string()),
        ("fetched_at", TS),
    ]
)

TABLES = (
    TableSpec(
        "pull_requests",
        "state",
        PULL_REQUESTS,
        keys=("repo", "number"),
        newer="fetched_at",
        log="pull_request_log",
        sort=("repo", "number"),
        typed=True,
    ),
    TableSpec("pull_request_log", "history", without(PULL_REQUESTS, "body"), day_from="fetched_at"),
    TableSpec("api_requests", "history", API_REQUESTS, day_from="requested_at"),
    TableSpec(
        "github_pages", "state", GITHUB_PAGES, keys=("repo", "state", "url"), newer="fetched_at"
    ),
    TableSpec("github_syncs", "history", GITHUB_SYNCS, day_from="started_at"),
    TableSpec("api_windows", "state", API_WINDOWS, keys=("host",), newer="updated_at"),
    TableSpec("rest_syncs", "history", REST_SYNCS, day_from="started_at"),
)
