"""Run summaries: per-stage timing and throughput, counts, first failures."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

from ingest import duck, storage
from ingest import markdown as md
from ingest.records import (
    EXTRACT_FAILED,
    EXTRACT_PERMANENT,
    BatchSummary,
    ChunkResult,
    ExtractSummary,
    needs_ocr_line,
    permanent_object_error,
)
from ingest.report.timing import human_bytes, seconds_so_far
from ingest.storage.location import DataDir, locate


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
    # The first documents whose text could not be extracted: (key, status, error).
    extract_failures: list[tuple[str, str, str]] = field(default_factory=list)
    # Documents extracted with image-only pages left unread (ExtractSummary.needs_ocr).
    needs_ocr: int = 0
    needs_ocr_first: list[tuple[str, int]] = field(default_factory=list)
    # Why the run ends Failed for its failed objects (``too_many_failures``), decided
    # before its summary is written so that the summary says what the state will say.
    failing: str = ""

    def add_chunk(self, chunk: ChunkResult) -> None:
        """Add one listing chunk: skipped and deleted objects, texts already current."""
        _add(self.counts, chunk.counts)
        if chunk.extract_unchanged:
            _add(self.extracted, {"unchanged": chunk.extract_unchanged})
        _add(self.reextracted, chunk.reextract)

    def add_batch(self, part: BatchSummary) -> None:
        """Add one download batch: counts, bytes and the first 20 failures."""
        _add(self.counts, part.counts)
        self.bytes += part.bytes
        self.failures.extend(part.failures[: max(0, 20 - len(self.failures))])

    def add_extracted(self, part: ExtractSummary) -> None:
        """Add one extract batch's counts by status."""
        _add(self.extracted, part.counts)
        if part.unchanged:
            _add(self.extracted, {"unchanged": part.unchanged})
        room = max(0, ExtractSummary.MAX_FAILURES - len(self.extract_failures))
        self.extract_failures.extend(part.failures[:room])
        self.needs_ocr += part.needs_ocr
        room = max(0, ExtractSummary.MAX_FAILURES - len(self.needs_ocr_first))
        self.needs_ocr_first.extend(part.needs_ocr_first[:room])

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def failed(self) -> int:
        return self.counts.get("failed", 0)

    @property
    def failed_extractions(self) -> int:
        return sum(self.extracted.get(s, 0) for s in EXTRACT_FAILED)

    @property
    def extractions(self) -> int:
        """Documents extracted by this run (rows written, whatever their status)."""
        return sum(n for s, n in self.extracted.items() if s != "unchanged")


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    """Add ``counts`` to the counts ``into``, key by key."""
    for key, n in counts.items():
        into[key] = into.get(key, 0) + n


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

    ``busy_seconds`` adds up the task attempts (they overlap), each the figure its
    ``timed`` log line prints (not rounded further than that line's figure can show);
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
               round(sum(seconds), 6) AS busy_seconds,
               round(epoch(max(ended_at)) - epoch(min(started_at)), 3) AS wall_seconds,
               max(attempts) AS max_attempt,
               count(*) FILTER (WHERE state <> 'completed') AS failed_attempts
        FROM {storage.scan(data_dir, "task_timings", staged_run=flow_run_id, prune=prune)}
        WHERE flow_run_id = ?
        GROUP BY task_name ORDER BY min(started_at)
    """
    with duck.cursor(locate(data_dir).queries) as con:
        rows = duck.records(con.execute(sql, [flow_run_id]))
    for r in rows:
        wall = r["wall_seconds"] or 0
        r["items_per_s"] = round(r["items"] / wall, 1) if wall else None
        r["mb_per_s"] = round(r["bytes"] / 1e6 / wall, 2) if wall else None
    return rows


def failures_heading(shown: int, total: int) -> str:
    """``Failures (3)``, or ``First 20 of 250 failures`` when not all are shown."""
    return f"Failures ({total})" if shown >= total else f"First {shown} of {total} failures"


# How many failed keys a state message names (the rest are in the run summary).
KEYS_IN_MESSAGE = 3


def failed_items(summary: RunSummary) -> list[tuple[str, str, bool]]:
    """The run's failed downloads and extractions it knows of: (key, error, permanent)."""
    items = [(k, e, permanent_object_error(e)) for k, e in summary.failures]
    items += [
        (k, f"{status}: {e}" if e else status, status in EXTRACT_PERMANENT)
        for k, status, e in summary.extract_failures
    ]
    return items


def short(text: str, limit: int = 60) -> str:
    """``text`` on one line in at most ``limit`` characters, cut after a whole word (only a
    first word longer than the limit is cut inside), ending in "…" when cut."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = text[: limit - 1]
    if text[limit - 1] != " " and " " in head:  # the cut falls inside a word: drop it
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:") + "…"


def too_many_failures(summary: RunSummary, max_ratio: float) -> str:
    """Why the run fails for its failed objects (``2 of 12 objects failed (more than
    10%)``): more than ``max_ratio`` of the objects looked at (deleted ones aside)
    failed; empty when the run does not fail for them."""
    looked_at = summary.total - summary.counts.get("deleted", 0)
    if looked_at and summary.failed / looked_at > max_ratio:
        return f"{summary.failed} of {looked_at} objects failed (more than {max_ratio:.0%})"
    return ""


# What S3 answers a GET of an object in an archive storage class (GLACIER, DEEP_ARCHIVE)
# that has not been restored: no retry fetches it until someone restores it.
ARCHIVED_ERRORS = ("InvalidObjectState",)
RESTORE_ADVICE = (
    "archived (S3 Glacier or Deep Archive): restore it (S3 console Initiate restore, or "
    "aws s3api restore-object), then the next run fetches it"
)


def archived_object_error(error: str | None) -> bool:
    """True when an ``s3_objects`` error row says the object is archived, not restored."""
    return any(code in (error or "") for code in ARCHIVED_ERRORS)


def object_error_advice(error: str | None) -> str:
    """Whether a retry fixes a failed object, and what to do otherwise, in a few words."""
    if permanent_object_error(error):
        return "yes"
    if archived_object_error(error):
        return f"no, {RESTORE_ADVICE}"
    return "no: the next run retries it"


def failed_objects_message(summary: RunSummary) -> str:
    """The state message of a run that completed with failed objects or failed extractions
    (empty without): the counts, which of them a retry cannot fix, the first keys."""
    parts = []
    if summary.failed:
        looked_at = summary.total - summary.counts.get("deleted", 0)
        parts.append(f"{summary.failed} of {looked_at} objects failed")
    if summary.failed_extractions:
        parts.append(f"{summary.failed_extractions} of {summary.extractions} extractions failed")
    if not parts:
        return ""
    items = failed_items(summary)
    permanent = [i for i in items if i[2]]
    archived = [k for k, e in summary.failures if archived_object_error(e)]
    retried = [
        k
        for k, e in summary.failures
        if not permanent_object_error(e) and not archived_object_error(e)
    ]
    timed_out = [k for k, status, _ in summary.extract_failures if status == "timeout"]
    said = []
    if permanent:
        said.append(f"{len(permanent)} permanent, no retry fixes them")
    if archived:
        said.append(f"{len(archived)} archived: restore them, then the next run fetches them")
    if retried:
        said.append(f"{len(retried)} retried by the next run")
    if timed_out:
        said.append(f"{len(timed_out)} timed out")
    keys = "; ".join(f"{short(k, 50)}: {short(e)}" for k, e, _ in items[:KEYS_IN_MESSAGE])
    return (
        f"Completed with {' and '.join(parts)}"
        + (f" ({', '.join(said)})" if said else "")
        + (f": {keys}" if keys else "")
        + ". See the run-summary artifact."
    )


def markdown(summary: RunSummary, title: str) -> str:
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(summary.counts.items())) or "nothing"
    lines = [
        f"# {md.cell(title)}",
        "",
        f"**{summary.total} objects** ({counts}), {human_bytes(summary.bytes)} downloaded, "
        f"{seconds_so_far(summary.seconds)}.",
    ]
    if summary.failing:  # the run ends Failed: said so, not "Completed with ..."
        lines += ["", f"**Failed: {summary.failing}.**"]
    elif summary.failed or summary.failed_extractions:
        lines += ["", f"**{failed_objects_message(summary)}**"]
    known = summary.counts.get("failed before", 0)
    if known:
        lines += [
            "",
            f"**{known} unchanged objects failed for good on an earlier run** (an unsafe key): "
            "not tried again and not counted as tonight's failures until they change. They "
            "are `SELECT key, error FROM s3_objects WHERE status = 'failed'`.",
        ]
    if summary.extracted:
        extracted = ", ".join(f"{k}: {v}" for k, v in sorted(summary.extracted.items()))
        lines += ["", f"**Text extraction**: {extracted}."]
    if summary.needs_ocr:
        lines += ["", f"**{needs_ocr_line(summary.needs_ocr, summary.needs_ocr_first)}**"]
    lines += failure_tables(summary)
    return "\n".join(lines)


def failure_tables(summary: RunSummary) -> list[str]:
    """The failed downloads and failed extractions, each with its status, error and
    whether a retry can fix it; long lists cut, with the query listing them all."""
    run = duck.sql_literal(summary.run_id)
    statuses = ", ".join(map(duck.sql_literal, EXTRACT_FAILED))
    tables = [
        (
            "downloads",
            [(k, "failed", e, object_error_advice(e)) for k, e in summary.failures],
            summary.failed,
            f"SELECT key, error FROM s3_objects WHERE status = 'failed' AND run_id = {run}",
        ),
        (
            "extractions",
            [
                (k, s, e, "yes" if s in EXTRACT_PERMANENT else "no: a longer timeout may do")
                for k, s, e in summary.extract_failures
            ],
            summary.failed_extractions,
            f"SELECT key, status, error FROM documents WHERE status IN ({statuses}) "
            f"AND run_id = {run}",
        ),
    ]
    lines: list[str] = []
    for what, rows, failed, query in tables:
        if not rows:
            continue
        total = max(failed, len(rows))
        lines += [
            "",
            f"## Failed {what}: {failures_heading(len(rows), total)}",
            "",
            "| key | status | error | permanent |",
            "|---|---|---|---|",
            *(f"| {md.code(k)} | {s} | {md.cell(e)} | {p} |" for k, s, e, p in rows),
        ]
        if total > len(rows):
            lines += ["", f"All {total}: `{query}`"]
    return lines
