"""Run summaries: per-stage timing and throughput, counts, first failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from ingest import duck, storage
from ingest import markdown as md
from ingest.records import BatchSummary, ChunkResult, ExtractSummary
from ingest.storage.location import DataDir
from ingest.timing import human_bytes


@dataclass(slots=True)
class RunSummary:
    """What one flow run did; printed by the CLI and published as artifacts."""

    run_id: str
    counts: dict[str, int] = field(default_factory=dict)
    bytes: int = 0
    seconds: float = 0.0
    stages: list[dict[str, Any]] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    # documents rows written by text extraction, by status; "unchanged" counts objects whose
    # ETag and extractor version were already extracted (no row written).
    extracted: dict[str, int] = field(default_factory=dict)
    note: str | None = None  # why the run did nothing (another run held its target)
    # Unchanged objects extracted again, by why ("pdf extractor changed": 3, ...).
    reextracted: dict[str, int] = field(default_factory=dict)

    def add_counts(self, counts: dict[str, int]) -> None:
        for status, n in counts.items():
            self.counts[status] = self.counts.get(status, 0) + n

    def add_chunk(self, chunk: ChunkResult) -> None:
        """Add one listing chunk: skipped and deleted objects, texts already current."""
        self.add_counts(chunk.counts)
        if chunk.extract_unchanged:
            self.extracted["unchanged"] = (
                self.extracted.get("unchanged", 0) + chunk.extract_unchanged
            )
        for why, n in chunk.reextract.items():
            self.reextracted[why] = self.reextracted.get(why, 0) + n

    def add_batch(self, part: BatchSummary) -> None:
        """Add one download batch: counts, bytes and the first 20 failures."""
        self.add_counts(part.counts)
        self.bytes += part.bytes
        self.failures.extend(part.failures[: max(0, 20 - len(self.failures))])

    def add_extracted(self, part: ExtractSummary) -> None:
        """Add one extract batch's counts by status."""
        counts = dict(part.counts)
        if part.unchanged:
            counts["unchanged"] = part.unchanged
        for status, n in counts.items():
            self.extracted[status] = self.extracted.get(status, 0) + n

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)


def first_day(seconds: float) -> date:
    """A day no later than the first (UTC) a task of a run that has lasted ``seconds`` so
    far started on: ``stage_table``'s ``since`` for the running flow (a day early, for
    the clocks of other machines)."""
    return (datetime.now(UTC) - timedelta(seconds=seconds, days=1)).date()


def stage_table(
    data_dir: DataDir, flow_run_id: str, *, since: date | None = None
) -> list[dict[str, Any]]:
    """Per-stage figures of one flow run, from ``task_timings`` (with ``since``, the
    first day the run's tasks may have started: older days' files are not read, nor the
    files whose flow-run-id statistics leave the run out, so the cost follows the run,
    not the months of history kept).

    ``busy_seconds`` adds up the task attempts (they overlap);
    ``wall_seconds`` is first start to last end.
    """
    prune: list[tuple[str, str, Any]] = [("flow_run_id", "=", flow_run_id)]
    if since is not None:
        prune.append(("day", ">=", since))
    sql = f"""
        SELECT task_name AS stage,
               count(*) AS task_runs,
               sum(items) AS items,
               sum(bytes) AS bytes,
               round(sum(seconds), 3) AS busy_seconds,
               round(epoch(max(ended_at)) - epoch(min(started_at)), 3) AS wall_seconds,
               max(attempts) AS max_attempt,
               count(*) FILTER (WHERE state <> 'completed') AS failed_attempts
        FROM {storage.scan(data_dir, "task_timings", staged_run=flow_run_id, prune=prune)}
        WHERE flow_run_id = ?
        GROUP BY task_name ORDER BY min(started_at)
    """
    with duck.cursor() as con:
        cur = con.execute(sql, [flow_run_id])
        cols = [d[0] for d in cur.description or ()]
        rows = [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    for r in rows:
        wall = r["wall_seconds"] or 0
        r["items_per_s"] = round(r["items"] / wall, 1) if wall else None
        r["mb_per_s"] = round(r["bytes"] / 1e6 / wall, 2) if wall else None
    return rows


def failures_heading(shown: int, total: int) -> str:
    """``Failures (3)``, or ``First 20 of 250 failures`` when not all are shown."""
    return f"Failures ({total})" if shown >= total else f"First {shown} of {total} failures"


def failed_objects_message(summary: RunSummary) -> str:
    """The state message of a run that completed with failed objects (empty without)."""
    if not summary.failed:
        return ""
    looked_at = summary.total - summary.counts.get("deleted", 0)
    return (
        f"Completed with {summary.failed} of {looked_at} objects failed (under the "
        "max_failed_ratio threshold); the next run retries them. See the run-summary artifact."
    )


def markdown(summary: RunSummary, title: str) -> str:
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(summary.counts.items())) or "nothing"
    lines = [
        f"# {title}",
        "",
        f"**{summary.total} objects** ({counts}), {human_bytes(summary.bytes)} downloaded, "
        f"{summary.seconds:.2f} s from the flow's start to this summary (the UI's duration "
        "also counts the final commit).",
    ]
    if summary.failed:
        lines += ["", f"**{failed_objects_message(summary)}**"]
    if summary.extracted:
        extracted = ", ".join(f"{k}: {v}" for k, v in sorted(summary.extracted.items()))
        lines += ["", f"**Text extraction**: {extracted}."]
    if summary.failures:
        total = max(summary.failed, len(summary.failures))
        lines += [
            "",
            f"## {failures_heading(len(summary.failures), total)}",
            "",
            "| key | error |",
            "|---|---|",
        ]
        lines += [f"| {md.code(k)} | {md.cell(e)} |" for k, e in summary.failures]
    return "\n".join(lines)
