"""What ``ingest status`` prints: each source's freshness now, and the last nights."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ingest import duck, storage
from ingest.report import freshness
from ingest.storage.location import DataDir, locate


def freshness_now(data_dir: DataDir, now: datetime | None = None) -> list[dict[str, Any]]:
    """The ``source_freshness`` rows with the lag as of ``now`` (default: this moment)."""
    now = now or datetime.now(UTC)
    out = []
    for (source, _), r in sorted(freshness.current(data_dir).items()):
        last = r.get("last_success")
        lag = (now - last).total_seconds() if isinstance(last, datetime) else None
        out.append(
            {
                **r,
                "source": source,
                "last_success": last.strftime("%Y-%m-%d %H:%M UTC") if last else "never",
                "lag": freshness.lag_text(lag),
            }
        )
    return out


def last_nights(data_dir: DataDir, count: int = 7) -> list[dict[str, Any]]:
    """The last ``count`` nightly runs (``flow_runs``), newest first, each with its
    sources' outcomes (``s3-ingest completed, github-pulls failed``)."""
    sql = f"""
        WITH runs AS (SELECT * FROM {storage.scan(data_dir, "flow_runs")})
        SELECT n.flow_run_id, n.started_at, n.state, round(n.seconds, 2) AS seconds,
               n.message,
               string_agg(c.flow_name || ' ' || c.state, ', ' ORDER BY c.flow_name) AS sources
        FROM runs n LEFT JOIN runs c ON c.parent_flow_run_id = n.flow_run_id
        WHERE n.flow_name = 'nightly'
        GROUP BY ALL ORDER BY n.started_at DESC LIMIT ?
    """
    with locate(data_dir).connect() as con:
        rows = duck.records(con.execute(sql, [count]))
    for r in rows:
        if isinstance(r["started_at"], datetime):
            r["started_at"] = r["started_at"].astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")
    return rows
