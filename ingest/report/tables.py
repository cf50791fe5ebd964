"""The run-history tables: each task's timing, each flow run, each source's freshness
and its log."""

from __future__ import annotations

import pyarrow as pa

from ingest.storage.tables import TS, TableSpec

TASK_TIMINGS = pa.schema(
    [
        ("flow_run_id", pa.string()),
        ("flow_name", pa.string()),
        ("task_run_id", pa.string()),
        ("task_name", pa.string()),
        ("started_at", TS),
        ("ended_at", TS),
        ("seconds", pa.float64()),
        ("items", pa.int64()),
        ("bytes", pa.int64()),
        ("attempts", pa.int32()),
        ("state", pa.string()),
        ("error", pa.string()),
        ("worker", pa.string()),
    ]
)

# One row per finished flow run (ingest.report.history): which deployment it belongs to, so a
# run's summary can compare its stages with the previous run of the same deployment.
FLOW_RUNS = pa.schema(
    [
        ("flow_run_id", pa.string()),
        ("flow_name", pa.string()),
        ("deployment_id", pa.string()),
        ("parent_flow_run_id", pa.string()),
        ("started_at", TS),
        ("ended_at", TS),
        ("seconds", pa.float64()),
        ("items", pa.int64()),
        ("bytes", pa.int64()),
        ("failed", pa.int64()),
        ("state", pa.string()),
        ("message", pa.string()),
    ]
)

# Each source (ingest.report.freshness): its last successful sync and its lag, one row per
# flow and target, written by every run (a nightly run writes its children's rows) and
# logged, one row per run.
SOURCE_FRESHNESS = pa.schema(
    [
        ("source", pa.string()),  # the child flow: s3-ingest, github-pulls
        ("target", pa.string()),  # what it reads: s3://bucket/prefix, owner/name, ...
        ("last_success", TS),
        ("rows_changed", pa.int64()),  # objects or pull requests changed, last success
        ("lag_seconds", pa.float64()),  # checked_at - last_success
        ("state", pa.string()),  # this night's outcome
        ("seconds", pa.float64()),
        ("failed", pa.int64()),
        ("bytes", pa.int64()),
        ("flow_run_id", pa.string()),
        ("nightly_run_id", pa.string()),
        ("checked_at", TS),
    ]
)

TABLES = (
    TableSpec("task_timings", "history", TASK_TIMINGS, day_from="started_at"),
    TableSpec("flow_runs", "state", FLOW_RUNS, keys=("flow_run_id",), newer="ended_at"),
    TableSpec(
        "source_freshness",
        "state",
        SOURCE_FRESHNESS,
        keys=("source", "target"),
        newer="checked_at",
        log="source_nights",
    ),
    TableSpec("source_nights", "history", SOURCE_FRESHNESS, day_from="checked_at"),
)
