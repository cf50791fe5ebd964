"""Freshness of each source: when it last synced successfully, how much that
changed, and how far behind it is now.

A source is a flow and what it reads (``s3-ingest`` and ``s3://bucket/prefix``,
``github-pulls`` and its repositories, ``rest-ingest`` and the source's name).
Every run stages one ``source_freshness`` row for its source: a run of its own
at its end (``tasks.history.record_current_run``; its end-of-run hook then sets
its duration to Prefect's start to end and commits it, ``take_run_seconds``), a
nightly run one per child (each child's duration Prefect's already: the child had
ended).
The row replaces the stored one of the same source, and the same row is
appended to ``source_nights``, the run-by-run history; the nightly summary reads
the nightly runs' rows of it (``nightly_run_id`` set), ``ingest status`` the
current rows. A source that failed keeps its last success (and the rows that
success changed), so its lag grows until it syncs again.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from ingest import duck, storage
from ingest.storage.location import DataDir, locate

TABLE = "source_freshness"


@dataclass(slots=True)
class SourceNight:
    """One source in one nightly run: a ``source_freshness`` / ``source_nights`` row."""

    source: str
    target: str
    state: str
    seconds: float = 0.0
    rows_changed: int = 0
    failed: int = 0
    bytes: int = 0
    flow_run_id: str = ""
    nightly_run_id: str = ""
    last_success: datetime | None = None
    lag_seconds: float | None = None
    checked_at: datetime | None = None


def current(data_dir: DataDir) -> dict[tuple[str, str], dict[str, Any]]:
    """The stored ``source_freshness`` rows by (source, target): what earlier runs
    committed. A small query (a run's end asks it): the run's database (``duck.cursor``)."""
    relation = storage.scan(data_dir, TABLE)  # before connecting: a remote lake registers it
    with duck.cursor(locate(data_dir).queries) as con:
        rows = duck.records(con.execute(f"SELECT * FROM {relation}"))
    return {(r["source"], r["target"]): r for r in rows}


def settle(night: SourceNight, stored: dict[str, Any] | None, now: datetime) -> SourceNight:
    """Fill in last success and lag: tonight's when it completed, else the stored one's."""
    night.checked_at = now
    if night.state == "completed":
        night.last_success = now
    elif stored is not None and stored.get("last_success") is not None:
        night.last_success = stored["last_success"]
        night.rows_changed = int(stored.get("rows_changed") or 0)
    else:
        night.last_success = None
        night.rows_changed = 0
    if night.last_success is not None:
        night.lag_seconds = round((now - night.last_success).total_seconds(), 3)
    return night


def record(data_dir: DataDir, nights: list[SourceNight], *, staged_by: str) -> list[SourceNight]:
    """Settle and stage tonight's rows (committed with the nightly run); returns them."""
    # A completed night is its own last success: the stored rows matter only otherwise.
    failed = any(n.state != "completed" for n in nights)
    stored = current(data_dir) if failed else {}
    now = datetime.now(UTC)
    settled = [settle(n, stored.get((n.source, n.target)), now) for n in nights]
    if settled:
        storage.stage(data_dir, staged_by, TABLE, "source-freshness", [asdict(n) for n in settled])
    return settled


def take_run_seconds(data_dir: DataDir, staged_by: str, flow_run_id: str, seconds: float) -> bool:
    """Give run ``flow_run_id``'s staged freshness rows (under ``staged_by``, its
    ``history.end_staging``) ``seconds``, its start to end by Prefect's clock. A run of
    its own stages them at its end with the time it had been Running then; its end-of-run
    hook, once Prefect has recorded that end, sets the figure the UI shows and commits
    them with its ``flow_runs`` row. Returns whether any row was staged."""
    keys = storage.staging.parts(data_dir, staged_by, TABLE)
    for key in keys:
        part = storage.staging.read_part(data_dir, key)
        if part is None:
            continue
        rows = part.to_pylist()
        for row in rows:
            if row["flow_run_id"] == flow_run_id:
                row["seconds"] = float(seconds)
        name = key.rsplit("/", 1)[-1].removesuffix(".parquet")
        storage.stage(data_dir, staged_by, TABLE, name, rows)
    return bool(keys)


def lag_text(seconds: float | None) -> str:
    """``3 h 12 min``, ``45 s``; ``never`` for a source that never synced."""
    if seconds is None:
        return "never synced"
    s = int(seconds)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 86400} d {s % 86400 // 3600} h"


def markdown(nights: list[SourceNight]) -> str:
    """The freshness section of the nightly summary."""
    lines = [
        "## Freshness",
        "",
        "| source | reads | last success | rows changed then | lag | tonight |",
        "|---|---|---|---:|---|---|",
    ]
    for n in nights:
        when = n.last_success.strftime("%Y-%m-%d %H:%M UTC") if n.last_success else "never"
        lines.append(
            f"| {n.source} | {n.target} | {when} | {n.rows_changed} "
            f"| {lag_text(n.lag_seconds)} | {n.state} |"
        )
    return "\n".join(lines)
